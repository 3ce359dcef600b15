// Package queue owns the durable per-(tenant, flow) log: its frames, the
// checkpoint, the retry schedule, the id counter, dead letters and their
// marks, the worker loop and its verdicts, housekeeping, and the lock files.
//
// It knows nothing of flows: a worker hands a message to a handler and gets a
// verdict back (ack, retry, retry-later, dead-letter or drop).
package queue
