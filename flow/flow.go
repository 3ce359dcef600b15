package flow

import (
	"iter"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nexushq/nexus/lineerr"
)

// Effect is something a step does outside the flow.
type Effect string

// The effects a step may use; a flow declares the ones it uses in its
// front matter.
const (
	EffectHTTPEgress   Effect = "http_egress"
	EffectQueuePublish Effect = "queue_publish"
)

// Defaults of the front matter keys.
const (
	DefaultMaxAttempts    = 3
	DefaultInitialDelay   = 1000 * time.Millisecond
	DefaultBackoffFactor  = 2.0
	DefaultMaxDelay       = 60000 * time.Millisecond
	DefaultTimeout        = 30000 * time.Millisecond
	DefaultDedupTTL       = 24 * time.Hour
	DefaultReadTimeout    = 10000 * time.Millisecond
	DefaultConnectTimeout = 5000 * time.Millisecond
	DefaultMethod         = "POST"
)

// Flow is a compiled flow. It is immutable: every accessor returns values
// or read-only views, and one *Flow is shared by every execution.
type Flow struct {
	path         string
	tenant, name string
	description  string
	effects      []Effect
	retry        Retry
	maxBodyBytes int64
	timeout      time.Duration
	schedule     *Schedule
	dedup        *Dedup
	steps        []*Step
	faults       []*Step
	source       []byte
	nameLine     int // the line of flow:, for errors about the flow as a whole
}

// Path is the file the flow was compiled from, as given to Compile.
func (f *Flow) Path() string { return f.path }

// Tenant is the tenant that owns the flow.
func (f *Flow) Tenant() string { return f.tenant }

// Name is the flow's name.
func (f *Flow) Name() string { return f.name }

// Description is shown in listings and the UI.
func (f *Flow) Description() string { return f.description }

// Effects lists the effects the front matter declares, in order.
func (f *Flow) Effects() iter.Seq[Effect] { return seq(f.effects) }

// Retry is the flow's queue retry configuration.
func (f *Flow) Retry() Retry { return f.retry }

// MaxBodyBytes is the flow's message-size ceiling, or 0 when the server's
// --max-body-bytes applies.
func (f *Flow) MaxBodyBytes() int64 { return f.maxBodyBytes }

// Timeout is the duration ceiling of one execution.
func (f *Flow) Timeout() time.Duration { return f.timeout }

// Schedule is the flow's cron schedule, or nil when it has none.
func (f *Flow) Schedule() *Schedule { return f.schedule }

// Dedup is the flow's deduplication, or nil when it has no dedup_key.
func (f *Flow) Dedup() *Dedup { return f.dedup }

// Steps are the `## Step:` sections, in order. The caller must not modify
// the slice: it is the flow's own (a slice, not an iterator, so that every
// execution's loop over it allocates nothing).
func (f *Flow) Steps() []*Step { return f.steps }

// Faults are the `## Fault:` sections, in order: the fault sequence. The
// caller must not modify the slice.
func (f *Flow) Faults() []*Step { return f.faults }

// HasFaults reports whether the flow has a fault sequence.
func (f *Flow) HasFaults() bool { return len(f.faults) > 0 }

// Source is the flow's canonical source (see Canonical). The caller must
// not modify it.
func (f *Flow) Source() []byte { return f.source }

func seq[T any](s []T) iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, v := range s {
			if !yield(v) {
				return
			}
		}
	}
}

// Retry is a queue's retry configuration: the four queue_* keys.
type Retry struct {
	MaxAttempts   int
	InitialDelay  time.Duration
	BackoffFactor float64
	MaxDelay      time.Duration
}

// Schedule makes a flow a cron flow.
type Schedule struct {
	spec     string
	location *time.Location
	input    any
	sched    cron.Schedule
	fixed    bool // a fixed-time cron expression (see cronFixedTime)
}

// Spec is the schedule as written (five fields or a descriptor).
func (s *Schedule) Spec() string { return s.spec }

// Location is the schedule's time zone (UTC by default).
func (s *Schedule) Location() *time.Location { return s.location }

// Input is the document a tick delivers (schedule_input; {} by default).
func (s *Schedule) Input() any { return s.input }

// Next returns the first tick strictly after t, in the schedule's zone
// (the zero time when there is none). Across a change of the zone's
// offset (daylight saving), a cron expression ticks as Vixie cron runs a
// job: a fixed-time one (neither its minute nor its hour field begins
// with *, e.g. 30 2 * * *, @daily) ticks once at a time the clock shows
// twice, at its first occurrence, and ticks at a time the clock jumps
// over right after the jump, at the first instant that exists, once; a
// wildcard one (*/15 * * * *, 0 * * * *, @hourly) ticks at the times the
// wall clock reads: twice in a repeated hour, not in a skipped one (see
// nextWall; robfig/cron's Next, which it replaces, erred in zones whose
// clock moves by less than an hour). @every counts elapsed time.
func (s *Schedule) Next(t time.Time) time.Time {
	if spec, ok := s.sched.(*cron.SpecSchedule); ok {
		return nextWall(spec, s.location, t, s.fixed)
	}
	return s.sched.Next(t.In(s.location))
}

// Every returns the period of an @every schedule, whose times count from
// when a scheduler started, in any zone; ok is false for the others.
func (s *Schedule) Every() (period time.Duration, ok bool) {
	if c, isEvery := s.sched.(cron.ConstantDelaySchedule); isEvery {
		return c.Delay, true
	}
	return 0, false
}

// Dedup is a flow's deduplication configuration.
type Dedup struct {
	// Key renders the deduplication key of a message.
	Key *Template
	// Absorb is true for dedup_on_failure: absorb (a failed delivery's
	// answer is replayed), false for rerun.
	Absorb bool
	// TTL is how long a committed key is remembered.
	TTL time.Duration
}

// RuleKind is the kind of a validate rule, which sets its status.
type RuleKind int

// The kinds of validate rules.
const (
	Semantic  RuleKind = iota // 422, the default
	Syntactic                 // 400
)

func (k RuleKind) String() string {
	if k == Syntactic {
		return "Syntactic"
	}
	return "Semantic"
}

// Rule is one line of a validate block.
type Rule struct {
	Expr    *Expr
	Message string
	Kind    RuleKind
	Line    int
}

// BlockKind says what a step's fenced block is.
type BlockKind int

// The kinds of fenced blocks.
const (
	BlockNone BlockKind = iota
	BlockNTD
	BlockValidate
	BlockCondition
)

// HTTPRequest is the call of an http_egress step.
type HTTPRequest struct {
	Endpoint       *Template
	Method         string
	Headers        []HeaderTemplate
	ReadTimeout    time.Duration
	ConnectTimeout time.Duration
}

// HeaderTemplate is one entry of an http_egress step's headers:.
type HeaderTemplate struct {
	Name  string // canonical form, e.g. Idempotency-Key
	Value *Template
}

// HeaderOp is one response header key of a step, in the order written:
// a set (response_header_<name>) or a removal (response_header_remove).
type HeaderOp struct {
	Name   string // canonical form, e.g. Retry-After
	Value  string
	Remove bool
}

// Status is a step's response_status: a literal code or a template rendered
// after the step ran.
type Status struct {
	Code     int       // the literal, when Template is nil
	Template *Template // rendered with $ as the step's output
}

// ParseStatus reads a status code as response_status takes one, written
// or rendered: digits alone, without a sign or a leading zero, from 100 to
// 599 ("+201" and "0201", which strconv.Atoi reads as 201, are not status
// codes). ok is false for anything else; n is the number read when the
// text is plain digits, so that a caller can say a code is out of range.
func ParseStatus(text string) (n int, ok bool) {
	if !lineerr.PlainWhole(text) || len(text) > 3 {
		return 0, false
	}
	n, _ = strconv.Atoi(text)
	return n, n >= 100 && n <= 599
}

// Step is one `## Step:` or `## Fault:` section. It is immutable.
type Step struct {
	name      string
	line      int
	fault     bool
	effect    Effect
	http      *HTTPRequest
	queue     string
	saveBody  string
	when      *Expr
	block     BlockKind
	ntd       *NTD
	rules     []Rule
	condition *Expr
	status    *Status
	headers   []HeaderOp
}

// Name is the step's name.
func (s *Step) Name() string { return s.name }

// Line is the line of the step's heading.
func (s *Step) Line() int { return s.line }

// IsFault reports whether the step is a `## Fault:` section.
func (s *Step) IsFault() bool { return s.fault }

// Effect is the step's effect, or "" when it has none.
func (s *Step) Effect() Effect { return s.effect }

// HTTP is the request of an http_egress step, or nil.
func (s *Step) HTTP() *HTTPRequest { return s.http }

// Queue is the target flow of a queue_publish step (same tenant).
func (s *Step) Queue() string { return s.queue }

// SaveBody is the ctx name the step's output is stored under, or "".
func (s *Step) SaveBody() string { return s.saveBody }

// When is the step's when: expression, or nil.
func (s *Step) When() *Expr { return s.when }

// Block is the kind of the step's fenced block.
func (s *Step) Block() BlockKind { return s.block }

// NTD is the step's ntd template (Block() == BlockNTD).
func (s *Step) NTD() *NTD { return s.ntd }

// Rules are the step's validate rules (Block() == BlockValidate). The
// caller must not modify the slice.
func (s *Step) Rules() []Rule { return s.rules }

// Condition is the step's condition fence (Block() == BlockCondition).
func (s *Step) Condition() *Expr { return s.condition }

// Status is the step's response_status (or fault_status), or nil.
func (s *Step) Status() *Status { return s.status }

// Headers are the step's response header keys in the order written.
func (s *Step) Headers() iter.Seq[HeaderOp] { return seq(s.headers) }
