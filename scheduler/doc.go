// Package scheduler owns cron: it turns a flow's schedule (robfig/cron) into
// ticks that are appended to the flow's own queue, so retries and the
// dead-letter queue apply to them, and it makes sure only one process ticks
// per flow when several share a state directory.
package scheduler
