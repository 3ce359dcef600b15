package host

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The management API and the UI show the same data: these views are built
// once per request from the live set, the queue files and the journal, and
// either encoded as JSON (/api/…) or rendered as HTML (/ui/…).

// JournalReader reads the journal, newest first (a *registry.Registry).
type JournalReader interface {
	Journal(ctx context.Context, q registry.JournalQuery) ([]registry.Entry, error)
}

// flowsView is the live set: GET /api/flows and the UI's Flows page.
type flowsView struct {
	Commit    optional   `json:"commit"`
	SyncedAt  optional   `json:"synced_at"`
	LastError *syncError `json:"last_error"`
	// SyncError is the run of sync rounds that could not run (the repo
	// unreachable, the registry unwritable), null when the last one ran.
	SyncError *syncFailure `json:"sync_error"`
	Flows     []flowEntry  `json:"flows"`
	Keys      []keyEntry   `json:"keys"`
	// KeysError is why the stored access keys were not taken (keys an
	// earlier build stored that this one refuses): Keys is then empty.
	KeysError string `json:"keys_error,omitempty"`
}

// keyEntry is an access key of the live set, named by its id (never the
// secret, nor its hash): what it may call and at what rate.
type keyEntry struct {
	ID     string   `json:"id"`
	Tenant string   `json:"tenant"`
	Flows  []string `json:"flows"` // ["*"] for every flow of the tenant
	Rate   float64  `json:"rate"`  // requests per second; 0 for no limit
	Burst  int      `json:"burst"`
}

type syncError struct {
	Commit optional `json:"commit"`
	Errors []string `json:"errors"`
}

type flowEntry struct {
	Tenant      string         `json:"tenant"`
	Flow        string         `json:"flow"`
	Version     int            `json:"version"`
	Commit      optional       `json:"commit"` // null for a flow published by nexus deploy
	PublishedAt string         `json:"published_at"`
	Path        string         `json:"path"`
	SHA256      string         `json:"sha256"`
	Description string         `json:"description"`
	Schedule    *scheduleEntry `json:"schedule"`
	Corrupt     string         `json:"corrupt,omitempty"`
}

type scheduleEntry struct {
	Spec string `json:"spec"`
	Zone string `json:"zone"`
	Next string `json:"next"`
}

// optional is a string the API writes as null when it is empty (as
// /status does).
type optional string

// MarshalJSON writes o, or null when it is empty.
func (o optional) MarshalJSON() ([]byte, error) {
	if o == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(o))
}

// uiTime formats a time as the CLI prints it: RFC 3339 UTC, whole seconds;
// "" for the zero time.
func uiTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

func (s *Server) flowsView(ctx context.Context) (flowsView, error) {
	v := flowsView{Flows: []flowEntry{}, Keys: []keyEntry{}}
	if s.cfg.Status != nil {
		st, err := s.cfg.Status.Status(ctx)
		if err != nil {
			return v, err
		}
		v.Commit, v.SyncedAt = optional(st.Commit), optional(uiTime(st.SyncedAt))
		if le := st.LastError; le != nil {
			v.LastError = &syncError{Commit: optional(le.Commit), Errors: append([]string{}, le.Errors...)}
		}
		v.SyncError = s.cfg.SyncHealth.failure()
	}
	live := s.cfg.Live.Live()
	if live == nil {
		return v, nil
	}
	v.Commit = optional(live.Commit()) // the commit this process serves
	now := s.cfg.Now()
	for _, lf := range live.Flows() {
		e := flowEntry{Tenant: lf.Tenant, Flow: lf.Name, Version: lf.Version, Commit: optional(lf.Commit),
			PublishedAt: uiTime(lf.PublishedAt), Path: lf.SourcePath, SHA256: lf.SHA256}
		if lf.Corrupt != nil {
			e.Corrupt = lf.Corrupt.Error()
		}
		if f := lf.Flow; f != nil {
			e.Description = f.Description()
			if sc := f.Schedule(); sc != nil {
				next := sc.Next(now)
				if s.cfg.NextTick != nil {
					next = s.cfg.NextTick(lf.Tenant, lf.Name, sc, now)
				}
				e.Schedule = &scheduleEntry{Spec: sc.Spec(), Zone: sc.Location().String(), Next: uiTime(next)}
			}
		}
		v.Flows = append(v.Flows, e)
	}
	if err := live.AccessErr(); err != nil {
		v.KeysError = err.Error()
	}
	for _, k := range live.Access().Keys() {
		flows := k.Flows
		if k.AllFlows {
			flows = []string{"*"}
		}
		v.Keys = append(v.Keys, keyEntry{ID: k.ID, Tenant: k.Tenant, Flows: flows, Rate: k.Rate, Burst: k.Burst})
	}
	return v, nil
}

// queueEntry is one queue: GET /api/queues and the UI's Queues page.
// Total and Processed count what segment.log holds now (a drain empties
// it); Pending is the difference.
type queueEntry struct {
	Tenant      string `json:"tenant"`
	Flow        string `json:"flow"`
	Total       int64  `json:"total"`
	Processed   int64  `json:"processed"`
	Pending     int64  `json:"pending"`
	Retrying    int    `json:"retrying"`
	DeadLetters int    `json:"dead_letters"`
	// DamagedDeadLetters are dead letters whose frames cannot be read
	// (nexus dlq list and the Queue page name them)
	DamagedDeadLetters int `json:"damaged_dead_letters"`
	InFlight           int `json:"in_flight"`
	// Worker says where the queue's worker runs: "leading" (in this
	// process, delivering), "standby" (started here, another process
	// leads) or "idle" (not started in this process).
	Worker string `json:"worker"`
	// Error is why the queue's log could not be counted (an I/O error):
	// Total, Processed and Pending are then 0; why its retry schedule
	// could not be read (Retrying is then 0); or why its dead letters
	// could not be counted (DeadLetters and DamagedDeadLetters are then 0).
	// Absent when both were counted. The queue is listed all the same,
	// as every other queue is.
	Error string `json:"error,omitempty"`
	// Uncounted and DeadLettersUncounted say which counts Error stands
	// for, for the pages
	Uncounted            bool `json:"-"`
	RetriesUnread        bool `json:"-"`
	DeadLettersUncounted bool `json:"-"`
}

// queueEntries describes the queues on disk or open here, sorted.
func (s *Server) queueEntries(tenant, flowName string) []queueEntry {
	infos := s.cfg.Queues.QueuesOf(tenant, flowName)
	out := make([]queueEntry, 0, len(infos))
	for _, info := range infos {
		out = append(out, s.queueEntry(info))
	}
	return out
}

// queueEntry is a queue's description, its counts those the manager read
// with its retries and dead letters (info.Counts, info.Depth): counted
// again here, a message that moved between the two reads would be counted
// twice, or not at all. A log that could not be counted is said in Error.
func (s *Server) queueEntry(info queue.QueueInfo) queueEntry {
	c := info.Counts
	e := queueEntry{Tenant: info.Tenant, Flow: info.Flow, Total: c.Total, Processed: c.Processed,
		Pending: info.Depth, Retrying: info.State.RetriesPending, DeadLetters: info.DeadLetters, DamagedDeadLetters: info.DamagedDeadLetters,
		InFlight: info.State.InFlight, Worker: "idle"}
	if info.State.Leading {
		e.Worker = "leading"
	} else if info.Open {
		e.Worker = "standby"
	}
	var errs []string
	if info.CountsErr != nil {
		e.Total, e.Processed, e.Pending, e.Uncounted = 0, 0, 0, true
		errs = append(errs, "its log could not be counted: "+info.CountsErr.Error())
	}
	if info.RetriesErr != nil {
		e.Retrying, e.RetriesUnread = 0, true
		errs = append(errs, "its retries could not be read: "+info.RetriesErr.Error())
	}
	if info.DeadLettersErr != nil {
		e.DeadLettersUncounted = true
		errs = append(errs, "its dead letters could not be counted: "+info.DeadLettersErr.Error())
	}
	e.Error = strings.Join(errs, "; ")
	return e
}

// The bounds of a dead-letter listing: a page holds at most maxPageSize
// entries (defaultPageSize unless asked), each payload cut to
// payloadPreview bytes; the whole payload is its own download
// (…/dlq/{id}/payload). A page of a dlq.log of any size stays small.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	payloadPreview  = 4 << 10
)

// deadLetterEntry is one pending dead letter: GET
// /api/queues/{tenant}/{flow}/dlq and the UI's Queue page. The payload is
// text when it is UTF-8 (JSON, XML), else base64 in PayloadBase64 (and
// Payload is absent); either holds at most its first payloadPreview bytes
// (Truncated), PayloadBytes being the whole length.
type deadLetterEntry struct {
	ID            uint64  `json:"id"`
	EnqueuedAt    string  `json:"enqueued_at"`
	FailedAt      string  `json:"failed_at"`
	Attempts      int     `json:"attempts"`
	LastError     string  `json:"last_error"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
	PayloadBytes  int     `json:"payload_bytes"`
	Truncated     bool    `json:"truncated"`
}

// deadLetterPage is a page of a queue's pending dead letters, by id.
type deadLetterPage struct {
	Tenant string `json:"tenant"`
	Flow   string `json:"flow"`
	Total  int    `json:"total"`
	// NextAfter is the after= of the next page; nil on the last. It is
	// the highest id the page looked at, which may be a dead letter that
	// cannot be decoded (counted, not listed): a page may list none and
	// have a next one.
	NextAfter *uint64 `json:"next_after"`
	// PrevAfter is the after= of the page before (the limit dead letters
	// before this page's first); nil on the first.
	PrevAfter *uint64 `json:"prev_after"`
	// LastAfter is the after= of the last page, counted limit at a time
	// from the first; nil on the last.
	LastAfter   *uint64           `json:"last_after"`
	DeadLetters []deadLetterEntry `json:"dead_letters"`
	// Damaged lists the parts of dlq.log and dlq.log.acked that fail
	// their check, as nexus dlq list reports them (a torn tail, a write in
	// progress, is not damage); absent when there are none. It holds the
	// first queue.PageDamage of them, in file order.
	Damaged []damageEntry `json:"damaged,omitempty"`
	// DamagedTotal counts them all; absent with Damaged.
	DamagedTotal int `json:"damaged_total,omitempty"`
	// Error is why the queue's dead-letter files could not be read (an
	// I/O error): the page then lists none and counts none. Absent when
	// they were read.
	Error string `json:"error,omitempty"`
}

// MoreDamaged is how many damaged frames the page counts but does not
// list.
func (p deadLetterPage) MoreDamaged() int { return p.DamagedTotal - len(p.Damaged) }

// damageEntry is a damaged frame of a queue's dead-letter files: a dead
// letter of dlq.log that cannot be read, so is not listed, or a mark of
// dlq.log.acked that is not applied, so the dead letter it marked is
// listed as pending again. Message says so in nexus dlq list's words.
type damageEntry struct {
	File    string  `json:"file"`
	Offset  int64   `json:"offset"`
	Length  int64   `json:"length"`
	ID      *uint64 `json:"id"` // null when the record is unreadable
	Reason  string  `json:"reason"`
	Message string  `json:"message"`
}

// newDamageEntry describes d as nexus dlq list does.
func newDamageEntry(d queue.Damage) damageEntry {
	e := damageEntry{File: d.File, Offset: d.Offset, Length: d.Length, Reason: d.Reason, Message: d.DeadLetterText()}
	if d.ID != 0 {
		e.ID = &d.ID
	}
	return e
}

// deadLetterPage is the page of tenant/flowName's pending dead letters
// after after, limit to a page. Files that cannot be read are said in its
// Error, as the listings say them, rather than failing the page: the
// queue's page still shows what could be read.
func (s *Server) deadLetterPage(tenant, flowName string, after uint64, limit int) deadLetterPage {
	v := deadLetterPage{Tenant: tenant, Flow: flowName, DeadLetters: []deadLetterEntry{}}
	q, err := s.cfg.Queues.Peek(tenant, flowName)
	if err == nil {
		err = fillDeadLetterPage(&v, q, after, limit)
	}
	if err != nil {
		v = deadLetterPage{Tenant: tenant, Flow: flowName, DeadLetters: []deadLetterEntry{},
			Error: "its dead letters could not be read: " + err.Error()}
	}
	return v
}

// fillDeadLetterPage reads q's page of dead letters into v.
func fillDeadLetterPage(v *deadLetterPage, q *queue.Queue, after uint64, limit int) error {
	page, err := q.DeadLetterPage(after, limit, payloadPreview)
	if err != nil {
		return err
	}
	v.Total = page.Total
	for _, d := range page.Entries {
		e := deadLetterEntry{ID: d.ID, EnqueuedAt: uiTime(d.EnqueuedAt), FailedAt: uiTime(d.FailedAt),
			Attempts: d.Attempts, LastError: d.LastError, PayloadBytes: d.PayloadSize, Truncated: len(d.Payload) < d.PayloadSize}
		if text, ok := utf8Prefix(d.Payload, e.Truncated); ok {
			e.Payload = &text
		} else {
			e.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
		}
		v.DeadLetters = append(v.DeadLetters, e)
	}
	if page.More {
		// the page's last id looked at: dead letters that cannot be
		// decoded are counted and not listed, so a page may list none
		// and have more after it
		next, last := page.Next, page.Last
		v.NextAfter, v.LastAfter = &next, &last
	}
	if page.HasPrev {
		prev := page.Prev
		v.PrevAfter = &prev
	}
	for _, d := range page.Damage {
		v.Damaged = append(v.Damaged, newDamageEntry(d))
	}
	v.DamagedTotal = page.DamageTotal
	return nil
}

// utf8Prefix returns b as text when it is UTF-8; a cut payload may end in
// the middle of a character, which is dropped.
func utf8Prefix(b []byte, cut bool) (string, bool) {
	if cut {
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	return string(b), utf8.Valid(b)
}

// journalEntry is one execution: GET /api/journal and the UI's Journal page.
type journalEntry struct {
	At            string `json:"at"`
	Door          string `json:"door"`
	Tenant        string `json:"tenant"`
	Flow          string `json:"flow"`
	Version       int    `json:"version"`
	CorrelationID string `json:"correlation_id"`
	MsgID         int64  `json:"msg_id"`
	Attempt       int    `json:"attempt"`
	Outcome       string `json:"outcome"`
	Status        int    `json:"status"`
	DurationMS    int64  `json:"duration_ms"`
	Error         string `json:"error"`
}

// journalEntries is a page of the journal, and the cursor of the page
// after it ("" when the page is not full: there is none).
func (s *Server) journalEntries(ctx context.Context, q registry.JournalQuery) ([]journalEntry, string, error) {
	if s.cfg.History == nil {
		return nil, "", errors.New("this host keeps no journal")
	}
	entries, err := s.cfg.History.Journal(ctx, q)
	if err != nil {
		return nil, "", err
	}
	out := make([]journalEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, journalEntry{At: uiTime(e.At), Door: e.Door, Tenant: e.Tenant, Flow: e.Flow, Version: e.Version,
			CorrelationID: e.CorrelationID, MsgID: e.MsgID, Attempt: e.Attempt, Outcome: e.Outcome, Status: e.Status,
			DurationMS: e.Duration.Milliseconds(), Error: e.Error})
	}
	next := ""
	if len(entries) > 0 && len(entries) == q.Limit {
		last := entries[len(entries)-1]
		next = fmt.Sprintf("%d.%d", last.At.UnixMicro(), last.Row)
	}
	return out, next, nil
}

// journalCursor reads a cursor of journalEntries (the time of an entry in
// microseconds, a dot, its row).
func journalCursor(c string) (*registry.Entry, error) {
	at, row, ok := strings.Cut(c, ".")
	us, aerr := strconv.ParseInt(at, 10, 64)
	n, rerr := strconv.ParseInt(row, 10, 64)
	if !ok || aerr != nil || rerr != nil || n < 1 {
		return nil, fmt.Errorf("before %q is not a cursor of the journal (next_before of the page before)", c)
	}
	return &registry.Entry{At: time.UnixMicro(us), Row: n}, nil
}

// dlqAction replays or discards a pending dead letter (the UI's buttons
// and POST /api/queues/{tenant}/{flow}/dlq/{id}/{action}). It returns the
// id of the message a replay appended. A request that ends (its client
// gone) before the action holds the queue's append lock writes nothing.
func (s *Server) dlqAction(ctx context.Context, action, tenant, flowName string, id uint64) (uint64, error) {
	switch action {
	case "replay":
		msg, err := s.cfg.Queues.ReplayContext(ctx, tenant, flowName, id, queue.SourceReplay, flow.NewUUID())
		return msg.ID, err
	case "discard":
		return 0, s.cfg.Queues.DiscardContext(ctx, tenant, flowName, id)
	}
	return 0, fmt.Errorf("unknown action %q (replay or discard)", action)
}

// errNotPending names the dead letter that is not pending, in the CLI's
// words.
func errNotPending(tenant, flowName string, id uint64) error {
	return &queue.NotPendingError{Tenant: tenant, Flow: flowName, ID: id}
}
