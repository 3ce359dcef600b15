// Package registry owns registry.db, the SQLite file shared by the server
// processes and the CLI: flow versions and their artifacts, latest pointers,
// a generation counter, access keys, sync state, the dedup store (which
// implements engine's interface structurally), and the journal table with
// its batched writer.
//
// It builds the live set: an immutable snapshot behind an atomic pointer,
// built fully and then swapped with one pointer store.
package registry
