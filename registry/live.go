package registry

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/clock"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/lifecycle"
)

// LiveSet is one immutable snapshot of what is deployed: the latest version
// of every flow, compiled, and the access keys. A request takes one
// snapshot and finishes on it, whatever is published meanwhile.
type LiveSet struct {
	generation int64
	commit     string
	flows      map[flowKey]*LiveFlow
	list       []*LiveFlow
	access     *access.Set
	accessErr  error // why the stored keys were not taken (access is then empty)
}

type flowKey struct{ tenant, flow string }

// LiveFlow is the latest version of one flow.
type LiveFlow struct {
	Tenant, Name string
	Version      int
	SHA256       string // hex SHA-256 of the artifact, as published
	SourcePath   string
	Commit       string
	PublishedAt  time.Time
	// Flow is the compiled flow; nil when Corrupt is set.
	Flow *flow.Flow
	// Corrupt is set when the stored artifact failed its integrity check
	// (its bytes do not match their SHA-256) or does not compile.
	Corrupt error
}

// Commit is the config repo commit of the set ("" when nothing came from
// git).
func (l *LiveSet) Commit() string { return l.commit }

// Generation is the registry generation the set was built from.
func (l *LiveSet) Generation() int64 { return l.generation }

// Lookup returns the latest version of tenant/flow.
func (l *LiveSet) Lookup(tenant, flow string) (*LiveFlow, bool) {
	f, ok := l.flows[flowKey{tenant, flow}]
	return f, ok
}

// CanReplay says whether a dead letter of tenant/flow may be replayed: its
// flow is live (a worker drops a message of a flow that is not, so the
// replayed message would be lost). A nil set (no registry, or none loaded
// yet) has no live flow.
func (l *LiveSet) CanReplay(tenant, flow string) error {
	if l != nil {
		if lf, ok := l.Lookup(tenant, flow); ok {
			if lf.Flow != nil {
				return nil
			}
			return &NotLiveError{Tenant: tenant, Flow: flow, Corrupt: lf.Corrupt}
		}
	}
	return &NotLiveError{Tenant: tenant, Flow: flow}
}

// NotLiveError is CanReplay's refusal. Corrupt is set when the flow is
// deployed but its artifact fails its integrity check.
type NotLiveError struct {
	Tenant, Flow string
	Corrupt      error
}

func (e *NotLiveError) Error() string {
	if e.Corrupt != nil {
		return fmt.Sprintf("flow %s/%s cannot run (its artifact is corrupt): a replayed message would fail again; publish the flow again first", e.Tenant, e.Flow)
	}
	return fmt.Sprintf("flow %s/%s is not live: its worker would drop a replayed message; publish the flow first", e.Tenant, e.Flow)
}

// Flows lists the set's flows sorted by tenant and name. The caller must
// not modify the slice.
func (l *LiveSet) Flows() []*LiveFlow { return l.list }

// Access is the access keys of the set (an empty set when none were
// published).
func (l *LiveSet) Access() *access.Set { return l.access }

// AccessErr is why the access keys stored in the registry were not taken,
// nil when they were: keys an earlier build stored that this build's
// parser refuses. Access is then empty (every door answers 401, as with
// keys: []) until keys are published again, by a sync or nexus deploy; the
// flows are served as stored.
func (l *LiveSet) AccessErr() error { return l.accessErr }

// Schedule describes one cron flow of a live set.
type Schedule struct {
	Tenant, Flow string
	Spec, Zone   string
	Next         time.Time // the next tick after the time asked, in the schedule's zone
}

// NextTick gives the next tick of a flow's schedule after now (the
// scheduler's, which knows when an @every schedule last ticked).
type NextTick func(tenant, flowName string, sc *flow.Schedule, now time.Time) time.Time

// Schedules lists the set's cron flows with their next tick after now, in
// each schedule's zone, sorted by tenant and flow. The tick is next's, or
// the schedule's own Next(now) when next is nil.
func (l *LiveSet) Schedules(now time.Time, next NextTick) []Schedule {
	var out []Schedule
	for _, lf := range l.list {
		if lf.Flow == nil || lf.Flow.Schedule() == nil {
			continue
		}
		sc := lf.Flow.Schedule()
		n := sc.Next(now)
		if next != nil {
			n = next(lf.Tenant, lf.Name, sc, now)
		}
		out = append(out, Schedule{Tenant: lf.Tenant, Flow: lf.Name, Spec: sc.Spec(), Zone: sc.Location().String(), Next: n.In(sc.Location())})
	}
	return out
}

// Live returns the current live set (nil before Load).
func (r *Registry) Live() *LiveSet { return r.live.Load() }

// Load builds the live set from the database in one read transaction and
// swaps it in with one pointer store. Flows whose artifact did not change
// are taken compiled from the current set. It returns the new set.
func (r *Registry) Load(ctx context.Context) (*LiveSet, error) {
	next, err := r.build(ctx, r.live.Load())
	if err != nil {
		return nil, err
	}
	for {
		// Two loads may race (the watcher and a sync): a set never
		// replaces a newer one.
		cur := r.live.Load()
		if cur != nil && cur.generation > next.generation {
			return cur, nil
		}
		if r.live.CompareAndSwap(cur, next) {
			return next, nil
		}
	}
}

// Refresh loads a new live set when the generation counter has moved since
// the current one was built, and reports whether it did. A counter below
// the live set's is a registry.db restored from an older backup under the
// running process: its content is loaded once, with a warning
// (registry_generation_went_back) naming both generations, and followed
// from there.
func (r *Registry) Refresh(ctx context.Context) (bool, error) {
	// the live set before the counter: a set is never newer than the file
	// it was read from, so a counter below it is a file that went back
	cur := r.live.Load()
	g, err := r.Generation(ctx)
	if err != nil {
		return false, err
	}
	switch {
	case cur != nil && cur.generation == g:
		return false, nil
	case cur != nil && g < cur.generation:
		return r.goBack(ctx, cur)
	}
	_, err = r.Load(ctx)
	return err == nil, err
}

// goBack swaps in the registry's content in place of cur, whose generation
// the registry's counter is now below. It does nothing when the live set
// is no longer cur (another load came first) or when the counter has
// reached cur's again (the next check judges it).
func (r *Registry) goBack(ctx context.Context, cur *LiveSet) (bool, error) {
	next, err := r.build(ctx, cur)
	if err != nil {
		return false, err
	}
	if next.generation >= cur.generation || !r.live.CompareAndSwap(cur, next) {
		return false, nil
	}
	// a generation this handle published before is not the one the
	// counter will reach again
	r.published.Store(0)
	if r.log != nil {
		r.log.Warn("the registry's generation went back (registry.db replaced by an older copy): serving what it holds",
			"event", "registry_generation_went_back", "live_generation", cur.generation, "generation", next.generation,
			"commit", next.commit, "flows", len(next.list))
	}
	return true, nil
}

func (r *Registry) build(ctx context.Context, prev *LiveSet) (*LiveSet, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	defer rollback(tx)
	return r.buildIn(ctx, tx, prev)
}

// buildIn builds a live set from what tx reads.
func (r *Registry) buildIn(ctx context.Context, tx *sql.Tx, prev *LiveSet) (*LiveSet, error) {
	set := &LiveSet{flows: map[flowKey]*LiveFlow{}}
	var err error
	if set.generation, err = readGeneration(ctx, tx); err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	commit, err := getState(ctx, tx, "commit")
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	set.commit = string(commit)
	src, err := getState(ctx, tx, "access")
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	if set.access, err = access.Parse("access.yaml", src); err != nil {
		// Stored keys this build refuses (written by an earlier one) stopped
		// nexus serve at start, and with it the sync that could bring the
		// mended file: the set accepts no key instead, and says why.
		if len(src) > 0 {
			set.accessErr = fmt.Errorf("the stored access keys do not parse: %w", err)
			if r.log != nil && r.firstAccessReport(src) {
				r.log.Error("the stored access keys do not parse: no key is accepted until a sync or nexus deploy publishes keys again",
					"event", "access_unreadable", "error", err.Error())
			}
		}
		set.access, _ = access.Parse("access.yaml", []byte("keys: []\n"))
	}
	rows, err := tx.QueryContext(ctx, `SELECT v.tenant, v.flow, v.version, v.artifact, v.sha256, v.source_path, v.commit_id, v.published_at
		FROM latest l JOIN flow_versions v ON v.tenant = l.tenant AND v.flow = l.flow AND v.version = l.version
		ORDER BY v.tenant, v.flow`)
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	defer rows.Close()
	handed := r.takeCompiled()
	for rows.Next() {
		lf := &LiveFlow{}
		var art []byte
		var at int64
		if err := rows.Scan(&lf.Tenant, &lf.Name, &lf.Version, &art, &lf.SHA256, &lf.SourcePath, &lf.Commit, &at); err != nil {
			return nil, fmt.Errorf("reading the registry: %w", err)
		}
		lf.PublishedAt = time.UnixMilli(at).UTC()
		if old, ok := prev.lookupSame(lf); ok {
			lf.Flow, lf.Corrupt = old.Flow, old.Corrupt
		} else if f := handed[lf.SHA256]; f != nil && intact(lf, art) && f.Tenant() == lf.Tenant && f.Name() == lf.Name && f.Path() == lf.SourcePath {
			// published by this process: the stored bytes are checked, the
			// compiling is not done twice
			lf.Flow = f
		} else {
			lf.Flow, lf.Corrupt = loadArtifact(lf, art)
			if lf.Corrupt != nil && r.log != nil && r.firstCorruptReport(lf) {
				// otherwise only nexus status and the API say it: a
				// cron flow would stop ticking without a word
				msg := "a stored flow failed its integrity check and is not served"
				if errors.Is(lf.Corrupt, ErrNoLongerCompiles) {
					msg = "a stored flow does not compile under this build and is not served until its file is mended"
				}
				r.log.Error(msg, "event", "artifact_corrupt",
					"tenant", lf.Tenant, "flow", lf.Name, "version", lf.Version, "error", lf.Corrupt.Error())
			}
		}
		set.flows[flowKey{lf.Tenant, lf.Name}] = lf
		set.list = append(set.list, lf)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	sort.Slice(set.list, func(i, j int) bool {
		if set.list[i].Tenant != set.list[j].Tenant {
			return set.list[i].Tenant < set.list[j].Tenant
		}
		return set.list[i].Name < set.list[j].Name
	})
	return set, nil
}

type corruptKey struct {
	tenant, flow string
	version      int
	sha256       string
}

// firstCorruptReport reports whether lf's version is corrupt news to this
// process: two builds may race (the watcher and a sync), and a build that
// fails is retried at every round.
func (r *Registry) firstCorruptReport(lf *LiveFlow) bool {
	k := corruptKey{lf.Tenant, lf.Name, lf.Version, lf.SHA256}
	r.corruptMu.Lock()
	defer r.corruptMu.Unlock()
	if r.corruptLogged[k] {
		return false
	}
	if r.corruptLogged == nil {
		r.corruptLogged = map[corruptKey]bool{}
	}
	r.corruptLogged[k] = true
	return true
}

// firstAccessReport reports whether the stored access keys src are news to
// this process's access_unreadable line: builds race and repeat, as for
// firstCorruptReport.
func (r *Registry) firstAccessReport(src []byte) bool {
	sum := sha256.Sum256(src)
	r.corruptMu.Lock()
	defer r.corruptMu.Unlock()
	if r.accessLogged == sum {
		return false
	}
	r.accessLogged = sum
	return true
}

// handOver keeps f, just published by this process with the artifact
// SHA-256 sum (hex), for the next live set to take as it is compiled.
func (r *Registry) handOver(f *flow.Flow, sum string) {
	r.compiledMu.Lock()
	defer r.compiledMu.Unlock()
	if r.compiled == nil {
		r.compiled = map[string]*flow.Flow{}
	}
	r.compiled[sum] = f
}

// takeCompiled returns the flows handed over since the last build, and
// forgets them: a build takes them once.
func (r *Registry) takeCompiled() map[string]*flow.Flow {
	r.compiledMu.Lock()
	defer r.compiledMu.Unlock()
	m := r.compiled
	r.compiled = nil
	return m
}

// lookupSame returns prev's entry for the same version and artifact.
func (l *LiveSet) lookupSame(lf *LiveFlow) (*LiveFlow, bool) {
	if l == nil {
		return nil, false
	}
	old, ok := l.flows[flowKey{lf.Tenant, lf.Name}]
	return old, ok && old.Version == lf.Version && old.SHA256 == lf.SHA256
}

// ErrCorrupt is wrapped by a LiveFlow's Corrupt error when the stored
// artifact's bytes are not what was published.
var ErrCorrupt = errors.New("failed its integrity check")

// ErrNoLongerCompiles is wrapped by a LiveFlow's Corrupt error when the
// stored artifact is intact but this build's compiler refuses its source:
// a rule an upgrade tightened, which the flow's file must be mended for.
var ErrNoLongerCompiles = errors.New("does not compile under this build")

// intact reports whether the stored artifact's bytes match its recorded
// SHA-256.
func intact(lf *LiveFlow, art []byte) bool {
	sum := sha256.Sum256(art)
	return hex.EncodeToString(sum[:]) == lf.SHA256
}

func loadArtifact(lf *LiveFlow, art []byte) (*flow.Flow, error) {
	if !intact(lf, art) {
		return nil, fmt.Errorf("artifact %s/%s v%d %w", lf.Tenant, lf.Name, lf.Version, ErrCorrupt)
	}
	f, err := flow.LoadArtifact(lf.SourcePath, art)
	if err != nil && !errors.Is(err, flow.ErrBadArtifact) {
		// it was called a failed integrity check, which sent an operator
		// after the disk rather than the file
		return nil, fmt.Errorf("artifact %s/%s v%d %w (%s): %v", lf.Tenant, lf.Name, lf.Version, ErrNoLongerCompiles, flow.CompilerVersion, err)
	}
	if err != nil {
		return nil, fmt.Errorf("artifact %s/%s v%d %w: %v", lf.Tenant, lf.Name, lf.Version, ErrCorrupt, err)
	}
	if f.Tenant() != lf.Tenant || f.Name() != lf.Name {
		return nil, fmt.Errorf("artifact %s/%s v%d %w: it holds %s/%s", lf.Tenant, lf.Name, lf.Version, ErrCorrupt, f.Tenant(), f.Name())
	}
	return f, nil
}

// Watcher follows publications made by any process sharing the registry:
// it checks the generation counter every Interval and loads a new live set
// when it moved.
type Watcher struct {
	Registry *Registry
	Interval time.Duration // 0 means one second
	Logger   *slog.Logger  // nil means slog.Default()
	Clock    clock.Clock   // nil means the real clock
	// OnSwap, when set, is called after each new live set is in place.
	OnSwap func(*LiveSet)

	life lifecycle.Loop
}

// Start begins watching in the background and returns at once. Calling it
// on a started Watcher does nothing.
func (w *Watcher) Start() {
	interval := w.Interval
	if interval <= 0 {
		interval = time.Second
	}
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	clk := w.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	w.life.Start(func(ctx context.Context) {
		failing := false
		replaced := "" // the registry_replaced said last, not said again
		// one interval after the last check ends, the first one interval
		// after Start
		for {
			select {
			case <-ctx.Done():
				return
			case <-clk.After(interval):
			}
			if ctx.Err() != nil { // both were ready: the end wins
				return
			}
			// a file renamed over the registry, or the registry deleted:
			// this process would go on with the file it opened, without
			// a word, and lose what it writes at its restart
			if err := w.Registry.Replaced(); err == nil {
				replaced = ""
			} else if err.Error() != replaced {
				replaced = err.Error()
				log.Error(replaced, "event", "registry_replaced", "registry", w.Registry.Path())
			}
			swapped, err := w.Registry.Refresh(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				if !failing {
					log.Error("the live set could not be refreshed; serving the last one", "event", "live_set_refresh_failed", "error", err.Error())
				}
				failing = true
			case swapped:
				failing = false
				// a publication this process's sync has not loaded itself:
				// most often another process's (its sync, nexus deploy;
				// two processes following different repos into one state
				// directory show here at every round). This handle's own,
				// loaded here between its publication and its publisher's
				// load, is the publisher's to report (sync_applied).
				ls := w.Registry.Live()
				if ls.Generation() != w.Registry.published.Load() {
					log.Info("the live set changed", "event", "live_set_changed",
						"generation", ls.Generation(), "commit", ls.Commit(), "flows", len(ls.Flows()))
				}
				if w.OnSwap != nil {
					w.OnSwap(ls)
				}
			default:
				failing = false
			}
		}
	})
}

// Stop ends the watching and waits for it. It is safe to call more than
// once, and without Start.
func (w *Watcher) Stop() { w.life.Stop() }
