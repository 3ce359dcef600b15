package registry

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexushq/nexus/lifecycle"
)

// Entry is one execution in the journal.
type Entry struct {
	// Row is the entry's row in the journal, set when it is read (with
	// At, the cursor of the page after it: JournalQuery.Before)
	Row           int64
	At            time.Time
	Door          string // run, enqueue or cron
	Tenant, Flow  string
	Version       int
	CorrelationID string
	MsgID         int64 // the queue message id; 0 on /run
	Attempt       int
	Outcome       string // succeeded, filtered, fault_handled, failed
	Status        int
	Duration      time.Duration
	Error         string
}

// JournalConfig tunes a JournalWriter. Zero fields take the defaults.
type JournalConfig struct {
	// Buffer is how many entries wait for the writer; when it is full the
	// oldest waiting entry is dropped (and counted) so that no door blocks.
	// Default 65536.
	Buffer int
	// BatchSize is the most entries written in one transaction. Default 1024.
	BatchSize int
	// FlushEvery is the longest an entry waits for its batch. Default 200 ms.
	FlushEvery time.Duration
	// Retention is how long entries are kept; 0 keeps them forever.
	Retention time.Duration
	// MaxEntries is the most entries kept: at each prune, the oldest
	// written beyond it are deleted, whatever Retention says, so that a
	// busy host's journal cannot fill its disk (a week at 1,000
	// executions a second is 600 million rows). 0 keeps any number.
	MaxEntries int64
	// PruneEvery is how often old entries are deleted. Default 1 minute.
	PruneEvery time.Duration
	// Logger receives the writer's warnings; nil means slog.Default().
	Logger *slog.Logger
}

// JournalWriter writes journal entries off the hot path: Append puts an
// entry in a buffer and returns; a background goroutine writes batches,
// woken when a batch is full or every FlushEvery (not for each entry).
type JournalWriter struct {
	r       *Registry
	cfg     JournalConfig
	dropped atomic.Int64
	// overflows counts the entries a full buffer dropped in Append alone
	// since the buffer was last empty, for its warning at the 1st, 2nd,
	// 4th, 8th…: the other drops (Stop, a refused entry, putBack) are
	// logged where they happen
	overflows atomic.Int64
	written   atomic.Int64

	bufMu sync.Mutex
	ring  []Entry       // waiting entries: a ring that grows up to cfg.Buffer
	head  int           // the oldest waiting entry's index in ring
	count int           // how many wait
	full  chan struct{} // capacity 1: a batch is waiting
	// stopped is set by Close once the writer has written what it could:
	// an entry appended after (an execution that outlived the shutdown)
	// would never be written, so it is counted and logged as dropped
	stopped bool
	late    atomic.Int64 // entries appended after Stop, for their warning
	lost    atomic.Int64 // batches putBack could not keep since the buffer was last empty, for their line
	// refused counts the entries the database refused for what they
	// hold since the last round that wrote entries and refused none, for
	// their line at the 1st, 2nd, 4th, 8th…
	refused atomic.Int64

	life lifecycle.Loop
}

// NewJournalWriter returns a writer for r's journal. Start it before use.
func (r *Registry) NewJournalWriter(cfg JournalConfig) *JournalWriter {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 1 << 16
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 200 * time.Millisecond
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &JournalWriter{r: r, cfg: cfg, full: make(chan struct{}, 1)}
}

// Append queues e for writing. It never blocks: when the buffer is full the
// oldest waiting entry is dropped and counted.
func (w *JournalWriter) Append(e Entry) {
	w.bufMu.Lock()
	if w.stopped {
		w.bufMu.Unlock()
		w.dropped.Add(1)
		if n := w.late.Add(1); sparse(n) {
			w.cfg.Logger.Warn("journal entries came after the journal was closed: dropped", "event", "journal_dropped", "dropped", n,
				"tenant", e.Tenant, "flow", e.Flow, "correlation_id", e.CorrelationID)
		}
		return
	}
	dropped := false
	switch {
	case w.count == len(w.ring) && len(w.ring) < w.cfg.Buffer:
		w.grow()
	case w.count == len(w.ring):
		w.head = (w.head + 1) % len(w.ring) // the oldest is overwritten
		w.count--
		dropped = true
	}
	w.ring[(w.head+w.count)%len(w.ring)] = e
	w.count++
	ready := w.count >= w.cfg.BatchSize
	w.bufMu.Unlock()
	if ready {
		select {
		case w.full <- struct{}{}:
		default:
		}
	}
	if dropped {
		w.dropped.Add(1)
		if n := w.overflows.Add(1); sparse(n) {
			w.cfg.Logger.Warn("journal buffer full: dropping the oldest entries", "event", "journal_dropped", "dropped", n)
		}
	}
}

// grow doubles the ring, up to cfg.Buffer entries, keeping the order.
func (w *JournalWriter) grow() {
	ring := make([]Entry, min(max(2*len(w.ring), 256), w.cfg.Buffer))
	n := copy(ring, w.ring[w.head:])
	copy(ring[n:], w.ring[:w.head])
	w.ring, w.head = ring, 0
}

// take returns up to BatchSize waiting entries, oldest first, in batch.
func (w *JournalWriter) take(batch []Entry) []Entry {
	w.bufMu.Lock()
	defer w.bufMu.Unlock()
	batch = batch[:0]
	for range min(w.count, w.cfg.BatchSize) {
		batch = append(batch, w.ring[w.head])
		w.ring[w.head] = Entry{}
		w.head = (w.head + 1) % len(w.ring)
		w.count--
	}
	return batch
}

// writeOneByOne writes the entries of a batch the database refused for
// what it holds (first), one at a time, and drops and counts those it
// refuses again.
func (w *JournalWriter) writeOneByOne(batch []Entry, first error) {
	dropped := 0
	var busy []Entry // refused for the moment: back to the buffer
	for i := range batch {
		err := first
		if len(batch) > 1 {
			err = w.r.writeEntries(context.Background(), batch[i:i+1], nil)
		}
		if err != nil && len(batch) > 1 && isTransient(err) {
			busy = append(busy, batch[i])
			continue
		}
		if err != nil {
			dropped++
			// at the 1st, 2nd, 4th, 8th… such entry: a database that
			// refuses every write for good (read-only, damaged) refused
			// every entry, and wrote a line for each at traffic rate
			if n := w.refused.Add(1); sparse(n) {
				w.cfg.Logger.Error("a journal entry could not be written: dropped", "event", "journal_write_failed",
					"tenant", batch[i].Tenant, "flow", batch[i].Flow, "correlation_id", batch[i].CorrelationID, "refused", n, "error", err.Error())
			}
			continue
		}
		w.written.Add(1)
	}
	w.dropped.Add(int64(dropped))
	if len(busy) > 0 {
		w.putBack(busy)
	}
}

// putBack returns a batch the database refused to the front of the
// buffer, oldest first, for the next write; what the buffer has no room
// for (the oldest) is dropped and counted.
func (w *JournalWriter) putBack(batch []Entry) {
	w.bufMu.Lock()
	defer w.bufMu.Unlock()
	for i := len(batch) - 1; i >= 0; i-- {
		if w.count == len(w.ring) && len(w.ring) < w.cfg.Buffer {
			w.grow()
		}
		if w.count == len(w.ring) {
			w.dropped.Add(int64(i + 1))
			// at the 1st, 2nd, 4th, 8th… time: a full disk under traffic
			// refuses every round
			if n := w.lost.Add(1); sparse(n) {
				w.cfg.Logger.Error("journal entries lost: the database refused them and the buffer is full", "event", "journal_dropped",
					"dropped", i+1, "times", n)
			}
			return
		}
		w.head = (w.head - 1 + len(w.ring)) % len(w.ring)
		w.ring[w.head] = batch[i]
		w.count++
	}
}

// drained ends a run of overflows when the buffer is empty (the writer
// has caught up): the next full buffer is warned of from its 1st drop
// again. Counted over the writer's whole life, a burst that dropped a
// million entries left the next one, short of two million, unsaid.
func (w *JournalWriter) drained() {
	w.bufMu.Lock()
	empty := w.count == 0
	w.bufMu.Unlock()
	if empty {
		w.overflows.Store(0)
		w.lost.Store(0)
	}
}

// discard empties the buffer and returns how many entries it held: a
// writer started again must not write what was counted as lost.
func (w *JournalWriter) discard() int {
	w.bufMu.Lock()
	defer w.bufMu.Unlock()
	n := w.count
	clear(w.ring)
	w.head, w.count = 0, 0
	return n
}

// Dropped is the number of entries that were never written: dropped by a
// full buffer, refused by the database for what they held, still refused
// when Stop gave up, or left or appended at Close.
func (w *JournalWriter) Dropped() int64 { return w.dropped.Load() }

// Written is the number of entries written.
func (w *JournalWriter) Written() int64 { return w.written.Load() }

// Start begins writing in the background and returns at once.
func (w *JournalWriter) Start() {
	w.bufMu.Lock()
	w.stopped = false
	w.bufMu.Unlock()
	w.life.Start(w.loop)
}

// Stop writes what is buffered, then stops the writer and waits for it.
// Entries appended afterwards wait for the next Start. It is safe to call
// more than once, and without Start.
func (w *JournalWriter) Stop() { w.life.Stop() }

// Close is Stop for good, at shutdown: an entry appended from then on (an
// execution that outlived the shutdown's deadline) is dropped, counted and
// logged (journal_dropped), as is one that came while the writer wrote its
// last batch; nothing would write them. Safe to call more than once.
func (w *JournalWriter) Close() {
	w.life.Stop()
	w.bufMu.Lock()
	w.stopped = true
	n := w.count
	clear(w.ring)
	w.head, w.count = 0, 0
	w.bufMu.Unlock()
	if n > 0 {
		w.dropped.Add(int64(n))
		w.cfg.Logger.Error("journal entries lost at stop: they came after the last write", "event", "journal_dropped", "dropped", n)
	}
}

func (w *JournalWriter) loop(ctx context.Context) {
	flush := time.NewTicker(w.cfg.FlushEvery)
	defer flush.Stop()
	prune := time.NewTicker(w.cfg.PruneEvery)
	defer prune.Stop()
	batch := make([]Entry, 0, w.cfg.BatchSize)
	var inserts journalInserts
	defer inserts.close()
	var (
		pruning atomic.Bool
		pruned  sync.WaitGroup
		capped  int64 // prunes that deleted entries for MaxEntries, for the log
	)
	failures := 0 // rounds refused in a row, for the log
	// writeAll writes what waits, a batch at a time; a batch the database
	// refuses (locked by another process past BusyTimeout, say) goes back
	// to the buffer for the next round. It writes no more than waited
	// when it began: entries arriving as fast as it writes them kept it
	// from ever returning, so that neither a prune nor a Stop was ever
	// taken up (Append's full signal starts the next round at once).
	writeAll := func() error {
		w.bufMu.Lock()
		left := w.count
		w.bufMu.Unlock()
		written, refused := w.written.Load(), w.refused.Load()
		defer func() {
			w.drained()
			// a round that wrote entries and refused none ends a run of
			// refusals: the next refused entry is logged from its 1st
			// again. A database refusing every entry writes none, so its
			// lines stay sparse
			if w.written.Load() > written && w.refused.Load() == refused {
				w.refused.Store(0)
			}
		}()
		for left > 0 {
			if batch = w.take(batch); len(batch) == 0 {
				return nil
			}
			left -= len(batch)
			inserts.prepare(w.r.db, batch)
			if err := w.r.writeEntries(context.Background(), batch, &inserts); err != nil {
				if !isTransient(err) {
					// refused for what it holds, not for the moment: tried
					// again it would block every entry behind it. One at a
					// time, so that only the refused ones are dropped.
					w.writeOneByOne(batch, err)
					continue
				}
				// logged at the 1st, 2nd, 4th, 8th… round of a run of
				// failures: a full disk failed every round (every
				// FlushEvery) and filled the log with the same line
				if failures++; sparse(int64(failures)) {
					w.cfg.Logger.Error("journal entries could not be written; they are tried again", "event", "journal_write_failed",
						"entries", len(batch), "failures", failures, "error", err.Error())
				}
				w.putBack(batch)
				return err
			}
			if failures > 0 {
				w.cfg.Logger.Info("journal entries are written again", "event", "journal_write_resumed", "failures", failures)
				failures = 0
			}
			w.written.Add(int64(len(batch)))
		}
		return nil
	}
	// the last round, at Stop: a database still refusing after a few
	// tries (each waits BusyTimeout for the lock) loses what waits:
	// counted. What came during the last round waits for the next Start
	// (or is dropped by Close, which says so)
	finish := func() {
		pruned.Wait()
		err := writeAll()
		for try := 0; err != nil && try < 2; try++ {
			err = writeAll()
		}
		if err != nil {
			if n := w.discard(); n > 0 {
				w.dropped.Add(int64(n))
				w.cfg.Logger.Error("journal entries lost at stop: the database refused them", "event", "journal_dropped", "dropped", n)
			}
		}
	}
	for {
		// a Stop is taken up before another round: under traffic the
		// full signal is always ready, and select picks among the ready
		// cases at random, so a Stop waited one round after another
		if ctx.Err() != nil {
			finish()
			return
		}
		select {
		case <-w.full:
			writeAll()
		case <-flush.C:
			writeAll()
		case <-prune.C:
			// beside the writing, which a long prune (batches with
			// pauses between) must not hold up; one prune at a time
			if (w.cfg.Retention > 0 || w.cfg.MaxEntries > 0) && pruning.CompareAndSwap(false, true) {
				pruned.Go(func() {
					defer pruning.Store(false)
					if w.cfg.Retention > 0 {
						if _, err := w.r.PruneJournal(ctx, w.r.now().Add(-w.cfg.Retention)); err != nil && ctx.Err() == nil {
							w.cfg.Logger.Error("old journal entries could not be deleted", "event", "journal_prune_failed", "error", err.Error())
						}
					}
					if w.cfg.MaxEntries > 0 {
						n, err := w.r.CapJournal(ctx, w.cfg.MaxEntries)
						if err != nil && ctx.Err() == nil {
							w.cfg.Logger.Error("journal entries past the most kept could not be deleted", "event", "journal_prune_failed", "error", err.Error())
						}
						// said at the 1st, 2nd, 4th… such prune: a busy
						// host deletes some at every prune
						if capped += min(n, 1); n > 0 && sparse(capped) {
							w.cfg.Logger.Warn("the journal holds its most entries: the oldest were deleted before the retention said so", "event", "journal_capped",
								"deleted", n, "max_entries", w.cfg.MaxEntries, "prunes", capped)
						}
					}
				})
			}
		case <-ctx.Done():
		}
	}
}

// journalRowsPerInsert is how many entries one INSERT statement writes:
// one statement per row costs SQLite and database/sql a call, a bind and
// a reset each; 64 rows take at most 768 parameters, far below SQLite's
// limit.
const journalRowsPerInsert = 64

// journalColumns are the journal's columns as an INSERT writes them, in
// Entry's order (journalArg reads them).
var journalColumns = [...]string{"at", "door", "tenant", "flow", "version", "correlation_id", "msg_id", "attempt", "outcome", "status", "duration_us", "error"}

// sharedColumns are the columns (bits by journalColumns' index) whose
// value one statement may bind once for all its rows: a queue's worker
// writes runs of entries of one flow, version, door and outcome. Binding
// is the costliest part of a row (a text parameter is copied into memory
// SQLite allocates, under its mutex), so a statement whose rows share
// these binds 4 parameters a row instead of 12.
const sharedColumns uint16 = 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<7 | 1<<8 | 1<<9 | 1<<11

// journalArg is entry e's value for column c, as it is bound.
func journalArg(e *Entry, c int) any {
	switch c {
	case 0:
		return e.At.UnixMicro()
	case 1:
		return e.Door
	case 2:
		return e.Tenant
	case 3:
		return e.Flow
	case 4:
		return int64(e.Version)
	case 5:
		return e.CorrelationID
	case 6:
		return e.MsgID
	case 7:
		return int64(e.Attempt)
	case 8:
		return e.Outcome
	case 9:
		return int64(e.Status)
	case 10:
		return e.Duration.Microseconds()
	default:
		return e.Error
	}
}

// sameColumns is the set of sharedColumns whose value every entry of
// rows has.
func sameColumns(rows []Entry) uint16 {
	same := sharedColumns
	first := &rows[0]
	for i := 1; i < len(rows) && same != 0; i++ {
		e := &rows[i]
		if e.Door != first.Door {
			same &^= 1 << 1
		}
		if e.Tenant != first.Tenant {
			same &^= 1 << 2
		}
		if e.Flow != first.Flow {
			same &^= 1 << 3
		}
		if e.Version != first.Version {
			same &^= 1 << 4
		}
		if e.Attempt != first.Attempt {
			same &^= 1 << 7
		}
		if e.Outcome != first.Outcome {
			same &^= 1 << 8
		}
		if e.Status != first.Status {
			same &^= 1 << 9
		}
		if e.Error != first.Error {
			same &^= 1 << 11
		}
	}
	return same
}

// insertJournalSQL is the INSERT of n journal rows whose columns in shared
// take one parameter for every row: those are numbered first, in column
// order, then each row's other columns. Only the first row's parameters
// are written with their numbers (?NNN): SQLite numbers a bare ? one past
// the highest so far, and names every numbered one, which the driver
// looks up for each parameter it binds in a list as long as the names.
func insertJournalSQL(n int, shared uint16) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO journal (`)
	b.WriteString(strings.Join(journalColumns[:], ", "))
	b.WriteString(`) VALUES `)
	var number [len(journalColumns)]int
	next := 1
	for c := range journalColumns {
		if shared&(1<<c) != 0 {
			number[c], next = next, next+1
		}
	}
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range journalColumns {
			if c > 0 {
				b.WriteByte(',')
			}
			param := number[c]
			if shared&(1<<c) == 0 {
				param, next = next, next+1
			}
			b.WriteByte('?')
			if i == 0 || shared&(1<<c) != 0 {
				b.WriteString(strconv.Itoa(param))
			}
		}
		b.WriteByte(')')
	}
	return b.String()
}

// appendJournalArgs appends the parameters of insertJournalSQL(len(rows),
// shared) for rows.
func appendJournalArgs(args []any, rows []Entry, shared uint16) []any {
	for c := range journalColumns {
		if shared&(1<<c) != 0 {
			args = append(args, journalArg(&rows[0], c))
		}
	}
	for i := range rows {
		for c := range journalColumns {
			if shared&(1<<c) == 0 {
				args = append(args, journalArg(&rows[i], c))
			}
		}
	}
	return args
}

// journalInserts are the INSERTs of journalRowsPerInsert rows a writer
// prepared, by the columns their rows share: parsed once for the writer's
// life (each transaction uses the copy prepared on its connection). A
// batch's rows share few sets of columns (all of them when a queue's
// worker writes a run, none when the doors' traffic mixes), so a few
// statements serve; past maxJournalInserts, a batch takes the statement
// that shares nothing.
type journalInserts struct {
	stmts map[uint16]*sql.Stmt
}

// maxJournalInserts bounds the statements a writer keeps prepared.
const maxJournalInserts = 16

// prepare prepares the INSERTs entries' whole statements will use, up to
// maxJournalInserts kinds: before the transaction that writes them, since
// a prepare in it would wait for a second connection of the pool, which
// writers waiting for the transaction's write lock may all hold. A batch
// whose statement could not be prepared runs its SQL text in the
// transaction, on its connection (see writeEntries).
func (s *journalInserts) prepare(db *sql.DB, entries []Entry) {
	for ; len(entries) >= journalRowsPerInsert; entries = entries[journalRowsPerInsert:] {
		shared := sameColumns(entries[:journalRowsPerInsert])
		if _, ok := s.stmts[shared]; ok {
			continue
		}
		if _, none := s.stmts[0]; len(s.stmts) >= maxJournalInserts || !none && len(s.stmts) == maxJournalInserts-1 {
			// the statement that shares nothing serves any rows: the
			// last room is kept for it
			shared = 0
			if _, ok := s.stmts[0]; ok {
				continue
			}
		}
		stmt, err := db.PrepareContext(context.Background(), insertJournalSQL(journalRowsPerInsert, shared))
		if err != nil {
			return
		}
		if s.stmts == nil {
			s.stmts = make(map[uint16]*sql.Stmt)
		}
		s.stmts[shared] = stmt
	}
}

// get returns the prepared INSERT of journalRowsPerInsert rows sharing
// shared, or the one sharing nothing, and the columns it shares; nil when
// neither was prepared.
func (s *journalInserts) get(shared uint16) (*sql.Stmt, uint16) {
	if stmt, ok := s.stmts[shared]; ok {
		return stmt, shared
	}
	if stmt, ok := s.stmts[0]; ok {
		return stmt, 0
	}
	return nil, shared
}

// close closes the statements.
func (s *journalInserts) close() {
	for _, stmt := range s.stmts {
		stmt.Close()
	}
	clear(s.stmts)
}

// writeEntries writes entries in one transaction, journalRowsPerInsert
// rows per statement, binding once the columns a statement's rows share;
// inserts are the writer's statements, prepared before (without one, or
// with nil, the SQL text runs in the transaction, on its connection).
func (r *Registry) writeEntries(ctx context.Context, entries []Entry, inserts *journalInserts) error {
	return r.write(ctx, func(tx *sql.Tx) error {
		args := make([]any, 0, len(journalColumns)*min(len(entries), journalRowsPerInsert))
		for len(entries) > 0 {
			n := min(len(entries), journalRowsPerInsert)
			rows := entries[:n]
			entries = entries[n:]
			shared := sameColumns(rows)
			var prepared *sql.Stmt
			if n == journalRowsPerInsert && inserts != nil {
				prepared, shared = inserts.get(shared)
			}
			args = appendJournalArgs(args[:0], rows, shared)
			var err error
			if prepared != nil {
				stmt := tx.StmtContext(ctx, prepared)
				_, err = stmt.ExecContext(ctx, args...)
				stmt.Close()
			} else {
				_, err = tx.ExecContext(ctx, insertJournalSQL(n, shared), args...)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// JournalQuery selects journal entries; empty fields match everything.
type JournalQuery struct {
	Tenant, Flow  string
	CorrelationID string // the executions of one request or message (its attempts)
	Limit         int    // 0 means 50
	// Before, when set, takes the entries listed after it (older): the
	// last entry of the page before, for the next page
	Before *Entry
}

// Journal returns entries newest first: by the time the execution began,
// then by the order they were written.
func (r *Registry) Journal(ctx context.Context, q JournalQuery) ([]Entry, error) {
	if q.Tenant != "" && q.Flow == "" && q.CorrelationID == "" {
		return r.tenantJournal(ctx, q)
	}
	query, args := journalQuery(q)
	return r.journalRows(ctx, query, args)
}

// journalRows runs a journal query (journalQuery's) and reads its entries.
func (r *Registry) journalRows(ctx context.Context, query string, args []any) ([]Entry, error) {
	rows, err := r.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var at, dur int64
		if err := rows.Scan(&e.Row, &at, &e.Door, &e.Tenant, &e.Flow, &e.Version, &e.CorrelationID, &e.MsgID, &e.Attempt, &e.Outcome, &e.Status, &dur, &e.Error); err != nil {
			return nil, err
		}
		e.At, e.Duration = time.UnixMicro(at).UTC(), time.Duration(dur)*time.Microsecond
		out = append(out, e)
	}
	return out, rows.Err()
}

// journalQuery is the SELECT of a Journal page, newest first; a query of
// a tenant alone is tenantJournal's, a page per flow.
func journalQuery(q JournalQuery) (string, []any) {
	var where []string
	var args []any
	if q.Tenant != "" {
		where, args = append(where, "tenant = ?"), append(args, q.Tenant)
	}
	if q.Flow != "" {
		where, args = append(where, "flow = ?"), append(args, q.Flow)
	}
	if q.CorrelationID != "" {
		where, args = append(where, "correlation_id = ?"), append(args, q.CorrelationID)
	}
	if b := q.Before; b != nil {
		// the order of the listing: at, then id, both descending. at <= ?
		// stands alone so that SQLite enters the index at the cursor:
		// written at < ? OR at = ? AND id < ?, it walked the index from
		// the newest entry, so a page cost every entry newer than it
		at := b.At.UnixMicro()
		where, args = append(where, "at <= ? AND (at < ? OR id < ?)"), append(args, at, at, b.Row)
	}
	query := `SELECT id, at, door, tenant, flow, version, correlation_id, msg_id, attempt, outcome, status, duration_us, error FROM journal`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	query += " ORDER BY at DESC, id DESC LIMIT ?"
	args = append(args, limit)
	return query, args
}

// tenantJournal is Journal for a tenant alone. The tenant alone in one
// query made SQLite read and sort every entry of the tenant for each page
// (through journal_flow_at): the whole journal, up to millions of rows, on
// an installation of one tenant. A tenant of at most tenantJournalFlows
// flows is read a page of each flow (journal_flow_at reads each newest
// first) and merged; one of more (renamed and withdrawn flows stay in the
// journal until the retention) is read newest first through journal_at,
// its entries picked from all, which stops at the page.
func (r *Registry) tenantJournal(ctx context.Context, q JournalQuery) ([]Entry, error) {
	var flows []string
	for len(flows) <= tenantJournalFlows {
		// the tenant's next flow, found in the index (no scan of its rows)
		var next string
		err := r.db.QueryRowContext(ctx, `SELECT flow FROM journal WHERE tenant = ? AND flow > ? ORDER BY flow LIMIT 1`,
			q.Tenant, lastOr(flows, "")).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			break
		} else if err != nil {
			return nil, err
		}
		flows = append(flows, next)
	}
	if len(flows) > tenantJournalFlows {
		query, args := tenantScanQuery(q)
		return r.journalRows(ctx, query, args)
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	var out []Entry
	for _, f := range flows {
		page := q
		page.Flow = f
		entries, err := r.Journal(ctx, page)
		if err != nil {
			return nil, err
		}
		out = append(out, entries...)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return cmp.Compare(b.Row, a.Row)
	})
	return out[:min(len(out), q.Limit)], nil
}

// tenantScanQuery is journalQuery of a tenant alone, made to walk
// journal_at newest first (the tenant a filter), which stops at the page.
func tenantScanQuery(q JournalQuery) (string, []any) {
	query, args := journalQuery(q)
	return strings.Replace(query, "FROM journal", "FROM journal INDEXED BY journal_at", 1), args
}

// tenantJournalFlows is the most flows of a tenant whose pages
// tenantJournal merges.
const tenantJournalFlows = 32

// lastOr is the last of list, or def when it is empty.
func lastOr(list []string, def string) string {
	if len(list) == 0 {
		return def
	}
	return list[len(list)-1]
}

// PruneJournal deletes entries older than before and returns how many.
func (r *Registry) PruneJournal(ctx context.Context, before time.Time) (int64, error) {
	return r.deleteInBatches(ctx, `DELETE FROM journal WHERE id IN (SELECT id FROM journal WHERE at < ? LIMIT ?)`, before.UnixMicro())
}

// CapJournal deletes the entries whose ids are more than max below the
// newest one's, and returns how many. Ids are the order entries were
// written in and only grow (rows go from the oldest), so this keeps at
// most the max newest entries, fewer by the holes among their ids (the
// retention prunes by time, and an entry is written when its execution
// ends, so a long execution's entry can go before older ids). Finding
// the exact cut (the newest entry past max) stepped through max rows of
// the table at every prune once the journal was full: the whole journal,
// every minute.
func (r *Registry) CapJournal(ctx context.Context, max int64) (int64, error) {
	var lo, hi sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT min(id), max(id) FROM journal`).Scan(&lo, &hi); err != nil || !hi.Valid || hi.Int64-lo.Int64 < max {
		return 0, err
	}
	return r.deleteInBatches(ctx, `DELETE FROM journal WHERE id IN (SELECT id FROM journal WHERE id <= ? ORDER BY id LIMIT ?)`, hi.Int64-max)
}

// pruneBatch is the most rows one pruning transaction deletes: a catch-up
// prune of millions of rows (after downtime, or a shorter retention) must
// not hold the database's write lock for seconds, which every door's
// dedup claim, every publication and other processes wait for.
const pruneBatch = 5000

// A pruning transaction is kept to about pruneHold of the write lock: a
// count of rows alone does not bound the time, since a dedup record holds
// a whole answer (up to a flow's max_body_bytes) and SQLite reads every
// page of a row it frees (5,000 answers of 1 MiB held the lock for longer
// than the busy timeout, and every claim failed). The first batch is
// pruneFirstBatch rows.
const (
	pruneHold       = 50 * time.Millisecond
	pruneFirstBatch = 8
)

// nextPruneBatch is the size of the batch after one of n rows that held
// the lock for took: doubled while a batch takes under half of pruneHold,
// halved when one takes longer than pruneHold, between 1 and pruneBatch.
func nextPruneBatch(n int, took time.Duration) int {
	switch {
	case took > pruneHold:
		return max(n/2, 1)
	case took < pruneHold/2:
		return min(n*2, pruneBatch)
	}
	return n
}

// deleteInBatches runs a DELETE of at most a batch of rows (its last
// parameter, sized by nextPruneBatch) in transactions of their own until
// one deletes fewer, and returns how many rows it deleted in all.
func (r *Registry) deleteInBatches(ctx context.Context, query string, args ...any) (int64, error) {
	var total int64
	for batch := pruneFirstBatch; ; {
		var n int64
		var took time.Duration
		err := r.write(ctx, func(tx *sql.Tx) error {
			// the time the lock is held, not the wait for it (another
			// process's writes would shrink the batches to a row)
			start := time.Now()
			defer func() { took = time.Since(start) }()
			res, err := tx.ExecContext(ctx, query, append(args, batch)...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
		batch = nextPruneBatch(batch, took)
		// a breath longer than SQLite's busy handler sleeps (100 ms at
		// most), so that a write waiting for the lock (a dedup claim, a
		// publication, another process) gets it between two batches
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(pruneBreath):
		}
	}
}

// pruneBreath is the pause between two batches of a prune.
const pruneBreath = 150 * time.Millisecond

// isTransient reports a refusal for the moment, not for what a batch
// holds: the database locked by another process, or the disk full or
// failing, which an operator mends. Entries so refused stay in the buffer
// (which drops its oldest when full, counted) rather than being dropped.
func isTransient(err error) bool {
	if isBusy(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_FULL") || strings.Contains(msg, "database or disk is full") ||
		strings.Contains(msg, "SQLITE_IOERR") || strings.Contains(msg, "disk I/O error")
}

// sparse says whether the n-th time something recurs is logged: the 1st,
// 2nd, 4th, 8th… (a line that would recur at every round, or every entry,
// cannot flood the log).
func sparse(n int64) bool { return n > 0 && n&(n-1) == 0 }
