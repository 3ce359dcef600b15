package scheduler_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin on a host without tz files

	"github.com/gofrs/flock"
	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/scheduler"
)

func TestSchedulerEveryTicksWithInput(t *testing.T) {
	e := newEnv(t)
	e.publish(
		cronFlow("acme", "nightly", "@every 30s", "", `{"zeta": 1, "alpha": {"b": 2, "a": [1, "x"]}, "s": "é\"<"}`),
		cronFlow("acme", "plain", "@every 45s", "", ""),
		flowSrc("acme", "not-cron", ""),
	)
	clk := clocktest.New(st0)
	e.start("p1", clk, 0) // the default Poll, 1 s
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, st0.Add(95*time.Second), 200)

	var nightly, plain []tick
	for _, k := range e.ticks.all() {
		switch {
		case k.Tenant == "acme" && k.Flow == "nightly":
			nightly = append(nightly, k)
		case k.Tenant == "acme" && k.Flow == "plain":
			plain = append(plain, k)
		default:
			t.Errorf("unexpected tick %v", k)
		}
	}
	const input = `{"zeta":1,"alpha":{"b":2,"a":[1,"x"]},"s":"é\"<"}`
	for i, k := range nightly {
		if want := st0.Add(time.Duration(30*(i+1)) * time.Second); !k.At.Equal(want) {
			t.Errorf("nightly tick %d at %v, want %v", i+1, k.At, want)
		}
		if k.Msg.Source != scheduler.Source || scheduler.Source != "cron" || string(k.Msg.Payload) != input || k.Msg.CorrelationID == "" {
			t.Errorf("nightly tick %d appended %+v (payload %s)", i+1, k.Msg, k.Msg.Payload)
		}
	}
	if len(nightly) != 3 {
		t.Errorf("nightly ticked %d times in 95 s, want 3: %v", len(nightly), nightly)
	}
	if len(plain) != 2 || !plain[0].At.Equal(st0.Add(45*time.Second)) || !plain[1].At.Equal(st0.Add(90*time.Second)) {
		t.Errorf("plain ticks = %v, want +45s and +90s", plain)
	}
	for _, k := range plain {
		if string(k.Msg.Payload) != "{}" {
			t.Errorf("the default schedule_input is %s, want {}", k.Msg.Payload)
		}
	}
	// each tick gets its own correlation id
	var ids []string
	for _, k := range e.ticks.all() {
		ids = append(ids, k.Msg.CorrelationID)
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 5 {
		t.Errorf("correlation ids %v are not unique", ids)
	}
}

// A five-field fixed-time schedule in Europe/Berlin ticks at the UTC
// instants of 02:30 Berlin time across the 2026 changes, as Vixie cron
// runs it (docs: Daylight saving): on 29 March, when 02:30 does not
// exist, right after the jump, at 03:00 CEST; on 25 October, when it
// happens twice, at the first (02:30 CEST) only. It skipped 29 March and
// ticked at both 02:30s of 25 October. The scheduler ticks exactly once
// per computed Next.
func TestSchedulerBerlinAcrossDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("no tz database (time/tzdata, imported above, embeds it): %v", err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name       string
		start, end time.Time
		want       []time.Time
	}{
		{"spring forward", utc("2026-03-27T12:00:00Z"), utc("2026-03-31T12:00:00Z"), []time.Time{
			utc("2026-03-28T01:30:00Z"), // 02:30 CET
			// 29 March: 02:00 CET jumps to 03:00 CEST, no 02:30: right after
			utc("2026-03-29T01:00:00Z"), // 03:00 CEST
			utc("2026-03-30T00:30:00Z"), // 02:30 CEST
			utc("2026-03-31T00:30:00Z"),
		}},
		{"fall back", utc("2026-10-23T12:00:00Z"), utc("2026-10-27T12:00:00Z"), []time.Time{
			utc("2026-10-24T00:30:00Z"), // 02:30 CEST
			utc("2026-10-25T00:30:00Z"), // 02:30 CEST, the first time; not again at 02:30 CET
			utc("2026-10-26T01:30:00Z"), // 02:30 CET
			utc("2026-10-27T01:30:00Z"),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ls := e.publish(cronFlow("acme", "nightly", "30 2 * * *", "Europe/Berlin", ""))
			lf, _ := ls.Lookup("acme", "nightly")
			sc := lf.Flow.Schedule()
			clk := clocktest.New(c.start)
			e.start("p1", clk, time.Hour)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, c.end, 1000)
			got := e.ticks.all()
			var at []time.Time
			for _, k := range got {
				at = append(at, k.At.UTC())
				if local := k.At.In(berlin); (local.Hour() != 2 || local.Minute() != 30) && local.Format("01-02 15:04") != "03-29 03:00" {
					t.Errorf("tick at %v is %v in Berlin, not 02:30", k.At, local)
				}
			}
			if !slices.EqualFunc(at, c.want, time.Time.Equal) {
				t.Errorf("ticks = %v\nwant    %v", at, c.want)
			}
			// exactly once per computed Next
			prev := c.start
			for i, k := range got {
				if next := sc.Next(prev); !k.At.Equal(next) {
					t.Errorf("tick %d at %v, but Next(%v) = %v", i, k.At, prev, next)
				}
				prev = k.At
			}
		})
	}
}

// A publication that changes the schedule takes effect when the scheduler
// sees the new live set (within Poll); removing the schedule stops the
// ticks and frees the flow's lock.
func TestSchedulerFollowsPublications(t *testing.T) {
	e := newEnv(t)
	clk := clocktest.New(st0)
	e.start("p1", clk, time.Second)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, st0.Add(5*time.Second), 100) // no live set yet: nothing
	base := clk.Now()
	// seen at the next poll (+1 s): ticks at +11 s, +21 s
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
	clk.StepUntil(t, base.Add(25*time.Second), 100)
	// the swap, seen at the next poll (+26 s): the next tick is 20 s after
	// the last (+21 s), as a process started in this one's place counts it
	e.publish(cronFlow("acme", "nightly", "@every 20s", "", ""))
	clk.StepUntil(t, base.Add(70*time.Second), 100)
	// the schedule removed (a version without one)
	e.publish(flowSrc("acme", "nightly", ""))
	clk.StepUntil(t, base.Add(72*time.Second), 100)
	lock := flock.New(filepath.Join(e.dir, "acme", "nightly.lock"))
	if ok, err := lock.TryLock(); !ok || err != nil {
		t.Errorf("the lock of a flow without a schedule is still held (%v)", err)
	}
	lock.Unlock()
	clk.StepUntil(t, base.Add(200*time.Second), 300)
	want := secs(11, 21, 41, 61)
	if got := e.ticks.times(base); !slices.Equal(got, want) {
		t.Errorf("ticks at %v, want %v", got, want)
	}
	// back again, then withdrawn altogether
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""), flowSrc("acme", "other", ""))
	clk.StepUntil(t, base.Add(215*time.Second), 100)
	e.publish(flowSrc("acme", "other", ""))
	clk.StepUntil(t, base.Add(300*time.Second), 200)
	if got, want := e.ticks.times(base), secs(11, 21, 41, 61, 211); !slices.Equal(got, want) {
		t.Errorf("ticks at %v, want %v", got, want)
	}
}

// A change of schedule_input alone reaches the next tick without moving it.
func TestSchedulerInputChangeAtNextTick(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", `{"v": 1}`))
	clk := clocktest.New(st0)
	e.start("p1", clk, time.Second)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, st0.Add(15*time.Second), 100)
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", `{"v": 2}`))
	clk.StepUntil(t, st0.Add(20*time.Second), 100)
	got := e.ticks.all()
	if len(got) != 2 || string(got[0].Msg.Payload) != `{"v":1}` || string(got[1].Msg.Payload) != `{"v":2}` || !got[1].At.Equal(st0.Add(20*time.Second)) {
		t.Errorf("ticks = %v (payloads %s, %s)", got, got[0].Msg.Payload, got[len(got)-1].Msg.Payload)
	}
}

// Two processes share the cron folder and the time: one ticks each period.
func TestSchedulerTwoProcessesOneTicks(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
	clk := clocktest.New(st0)
	e.start("p1", clk, time.Hour)
	e.start("p2", clk, time.Hour)
	clk.WaitCalls(t, 2)
	for range 6 {
		clk.StepEarliest(t)
	}
	got := e.ticks.all()
	if times := e.ticks.times(st0); !slices.Equal(times, secs(10, 20, 30, 40, 50, 60)) {
		t.Errorf("ticks at %v, want one every 10 s: %v", times, got)
	}
	for _, k := range got {
		if k.Sched != got[0].Sched {
			t.Errorf("both processes ticked: %v", got)
			break
		}
	}
}

// When the process holding a flow's lock stops, another takes over at its
// next due time, without ticking again a time already ticked. Each process
// has its own clock here, so that the order in which they reach the same
// time is the test's choice.
func TestSchedulerTakeoverWithoutDoubleTick(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
	clkA, clkB := clocktest.New(st0), clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	e.start("b", clkB, time.Hour)
	clkA.WaitCalls(t, 1)
	clkB.WaitCalls(t, 1)
	clkA.StepEarliest(t) // +10 s: a takes the lock and ticks
	clkB.StepEarliest(t) // +10 s: b is refused the lock
	clkA.StepEarliest(t) // +20 s: a ticks
	a.Stop()             // a goes away right after its tick
	clkB.StepEarliest(t) // +20 s: b takes the lock; 20 s was ticked already
	clkB.StepEarliest(t) // +30 s: b ticks
	clkB.StepEarliest(t) // +40 s
	want := []string{
		"a:acme/nightly@" + st0.Add(10*time.Second).Format(time.RFC3339),
		"a:acme/nightly@" + st0.Add(20*time.Second).Format(time.RFC3339),
		"b:acme/nightly@" + st0.Add(30*time.Second).Format(time.RFC3339),
		"b:acme/nightly@" + st0.Add(40*time.Second).Format(time.RFC3339),
	}
	if got := fmt.Sprint(e.ticks.all()); got != fmt.Sprint(want) {
		t.Errorf("ticks = %v\nwant    %v", got, want)
	}
}

// Ticks missed while no process ran are not replayed: after ten periods of
// downtime a restart ticks once, at the next period.
func TestSchedulerMissedTicksNotReplayed(t *testing.T) {
	for _, c := range []struct {
		spec   string
		period time.Duration
	}{
		{"@every 10s", 10 * time.Second},
		{"*/5 * * * *", 5 * time.Minute},
	} {
		t.Run(c.spec, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "nightly", c.spec, "", ""))
			start := st0.Truncate(time.Hour)
			clk := clocktest.New(start)
			s1 := e.start("p1", clk, time.Hour)
			clk.WaitCalls(t, 1)
			clk.StepEarliest(t)
			clk.StepEarliest(t)
			s1.Stop()
			stopped := clk.Now()
			clk.Advance(10 * c.period) // the downtime
			n := clk.Calls()
			e.start("p2", clk, time.Hour)
			clk.WaitCalls(t, n+1)
			if got := len(e.ticks.all()); got != 2 {
				t.Fatalf("the restart ticked at once: %v", e.ticks.all())
			}
			clk.StepEarliest(t)
			got := e.ticks.all()
			if len(got) != 3 || got[2].Sched != "p2" || !got[2].At.Equal(stopped.Add(11*c.period)) {
				t.Errorf("ticks = %v, want p1 twice then p2 once at +%v after the stop", got, 11*c.period)
			}
		})
	}
}

// A tick whose append fails (a worker budget spent, a full disk) is logged
// as cron_failed (what an alert watches) and its append is tried again at
// every poll: made late rather than lost, as long as the process holds the
// flow and the next tick is not due. (It was lost at the first failure.)
// One that still cannot be queued when the next tick is due is logged as
// lost, and the next tick is made as usual.
func TestSchedulerRetriesAFailedAppend(t *testing.T) {
	for _, c := range []struct {
		name      string
		failures  int   // appends that fail before one goes through
		scheduled []int // the cron_tick lines' scheduled_for, in seconds
		queued    []int // when their appends went through, in seconds
	}{
		{"queued at the third try", 3, []int{10, 20}, []int{13, 20}},
		{"still failing when the next is due", 10, []int{20}, []int{20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
			failed := 0
			e.ticks.fail = func(tick) error {
				if failed < c.failures {
					failed++
					return queue.ErrBudget
				}
				return nil
			}
			clk := clocktest.New(st0)
			e.start("p1", clk, time.Second)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, st0.Add(20*time.Second), 100)
			var scheduled []int
			for _, ev := range logs.Events(t, "cron_tick") {
				at, _ := time.Parse(time.RFC3339, ev["scheduled_for"].(string))
				scheduled = append(scheduled, int(at.Sub(st0)/time.Second))
			}
			if queued := e.ticks.times(st0); !slices.Equal(scheduled, c.scheduled) || !slices.Equal(queued, secs(c.queued...)) {
				t.Errorf("ticks for %v queued at %v (%d failures); want ticks for %v queued at %v", scheduled, queued, failed, c.scheduled, secs(c.queued...))
			}
			evs := logs.Events(t, "cron_failed")
			first := st0.Add(10 * time.Second).UTC().Format(time.RFC3339)
			lost := slices.ContainsFunc(evs, func(ev map[string]any) bool { return strings.Contains(ev["msg"].(string), "it is lost") })
			if len(evs) == 0 || evs[0]["scheduled_for"] != first || lost != (c.scheduled[0] != 10) {
				t.Errorf("cron_failed events %v; want the +10 s tick's failure, and its loss only if it was never queued", evs)
			}
		})
	}
}

// TestScheduleThatNeverFiresIsRefused: 30 February never comes, so such a
// schedule is a compile error rather than a cron flow that never ticks.
func TestScheduleThatNeverFiresIsRefused(t *testing.T) {
	src := cronFlow("acme", "never", "0 0 30 2 *", "", "")
	_, err := flow.Compile("flows/never.md", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `schedule "0 0 30 2 *" never fires`) {
		t.Fatalf("compile error = %v", err)
	}
}

func TestSchedulerStop(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
	scheduler.New(scheduler.Config{Live: e.live, Dir: e.dir}).Stop() // without Start
	clk := clocktest.New(st0)
	s := e.start("p1", clk, time.Hour)
	s.Start() // twice: one loop
	clk.WaitCalls(t, 1)
	clk.StepEarliest(t)
	if n := clk.Calls(); n != 2 {
		t.Errorf("%d waits after one step, want 2 (one loop)", n)
	}
	lock := flock.New(filepath.Join(e.dir, "acme", "nightly.lock"))
	if ok, _ := lock.TryLock(); ok {
		t.Fatal("the ticking process does not hold the flow's lock")
	}
	s.Stop()
	s.Stop()
	if ok, err := lock.TryLock(); !ok || err != nil {
		t.Errorf("Stop did not release the flow's lock: %v", err)
	}
	lock.Unlock()
	clk.Advance(time.Minute)
	if got := e.ticks.times(st0); !slices.Equal(got, secs(10)) {
		t.Errorf("ticks = %v after Stop", got)
	}
}

// TestLateHolderThenGoneNoDoubleTick: the holder, stuck through two due
// times (14:04 and 14:05), makes one late tick at 14:05:05 that stands for
// them both and records the later, 14:05, then stops; the standby that was
// refused at 14:05 takes the flow over and ticks 14:06, not 14:05 again (it
// once recorded 14:04, and 14:05 was ticked twice: decisions.md, "a process
// taking a flow over never ticks one time twice").
func TestLateHolderThenGoneNoDoubleTick(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepUntil(t, at(3, 0), 10) // a takes the lock and ticks 14:03
	clkB := clocktest.New(st0)
	e.start("b", clkB, 10*time.Second)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, at(5, 0), 100) // b refused at 14:03, 14:04, 14:05
	n := clkA.Calls()
	clkA.AdvanceTo(at(5, 5)) // a was stuck: wakes at 14:05:05
	clkA.WaitCalls(t, n+1)
	a.Stop()
	clkB.StepUntil(t, at(6, 30), 100)
	want := []string{"a@14:03:00", "a@14:05:05", "b@14:06:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// TestLateTickRecordsTheLastTimeHoweverLate: a tick late for more than a
// thousand times of its schedule (an @every 1s process suspended for
// 2000 s) records the last time it stands for (the loop once stopped at
// 1000, and a process taking over ticked the rest again).
func TestLateTickRecordsTheLastTimeHoweverLate(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "often", "@every 1s", "", ""))
	clk := clocktest.New(st0)
	e.start("a", clk, time.Hour)
	clk.WaitCalls(t, 1)
	n := clk.Calls()
	late := st0.Add(2000 * time.Second)
	clk.AdvanceTo(late) // the process was stopped 2000 s: it wakes once
	clk.WaitCalls(t, n+1)
	if got := len(e.ticks.all()); got != 1 {
		t.Fatalf("%d ticks; want the one late tick", got)
	}
	if got := e.lastRecord("acme", "often"); !got.Equal(late) {
		t.Fatalf("the late tick recorded %s; want the last time it stands for, %s", got.Format(time.RFC3339), late.Format(time.RFC3339))
	}
}

// TestUnqueuedTickOfAWithdrawnFlowIsLoggedAsLost: a tick whose append
// failed, and whose flow is withdrawn (or unscheduled) before a retry goes
// through, is logged as lost, as it is when the next tick is due or the
// process stops (docs/decisions.md); it was dropped with the flow's entry,
// unsaid.
func TestUnqueuedTickOfAWithdrawnFlowIsLoggedAsLost(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "nightly", "@every 10s", "", ""))
	e.ticks.fail = func(tick) error { return queue.ErrBudget }
	clk := clocktest.New(st0)
	s := e.start("p1", clk, time.Second)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, st0.Add(12*time.Second), 100)
	if len(logs.Events(t, "cron_failed")) == 0 {
		t.Fatal("the +10 s tick's append did not fail")
	}
	e.publish() // the flow is withdrawn
	clk.StepEarliest(t)
	clk.StepEarliest(t)
	s.Stop()
	lost := 0
	for _, ev := range logs.Events(t, "cron_failed") {
		if strings.Contains(ev["msg"].(string), "it is lost") {
			lost++
		}
	}
	if lost != 1 {
		t.Errorf("%d cron_failed lines say the +10 s tick is lost, want 1: it was never queued", lost)
	}
}
