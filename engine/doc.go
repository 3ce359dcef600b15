// Package engine runs a compiled flow on one document: its steps, effects,
// validation and conditions, the fault sequence, the response status and
// headers, the one status table, and deduplication.
//
// Effects that leave the process go through interfaces the package declares
// (Publisher for queue_publish, DedupStore), whose signatures use standard
// library types only, so that callers implement them without importing engine.
package engine
