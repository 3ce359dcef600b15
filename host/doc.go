// Package host owns the doors: HTTP on julienschmidt/httprouter (the access
// gate, body limits, signatures, XML, /run, /enqueue, the operations
// endpoints and the UI), the queue worker's handler (resolve the latest
// version, run it in engine, turn the result into a verdict) and the
// Publisher behind queue_publish. The worker budget is queue.Manager's; the
// doors answer 503 when it is spent.
//
// Sync and status come in as small interfaces.
package host
