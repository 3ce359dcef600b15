package scheduler_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/scheduler"
)

// TestNextTickOfAnEverySchedule: the next tick the views show (the UI,
// /api/flows, /status, nexus status) for an @every schedule is the one the
// scheduler makes: counted from the last tick, whichever process made it,
// or from when the process began to follow the flow. It was now + period,
// a time that moved at every reload and was never ticked.
func TestNextTickOfAnEverySchedule(t *testing.T) {
	e := newEnv(t)
	ls := e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	lf, _ := ls.Lookup("acme", "minutely")
	sc := lf.Flow.Schedule()

	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Second)
	clkA.WaitCalls(t, 1)
	clkA.StepUntil(t, st0.Add(30*time.Second), 100)
	check := func(who string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s: next tick %v, want %v", who, got.UTC().Format(time.TimeOnly), want.UTC().Format(time.TimeOnly))
		}
	}
	// before the first tick: a period after the process began
	check("a at +30s", a.NextTick("acme", "minutely", sc, clkA.Now()), st0.Add(time.Minute))

	// b starts 20 s after a; a holds the flow and ticks at +60 s
	clkB := clocktest.New(st0.Add(20 * time.Second))
	b := e.start("b", clkB, time.Second)
	clkB.WaitCalls(t, 1)
	clkA.StepUntil(t, st0.Add(90*time.Second), 100)
	clkB.StepUntil(t, st0.Add(90*time.Second), 100)
	if got := tickTimes(e.ticks.all()); len(got) != 1 || got[0] != "a@14:03:00" {
		t.Fatalf("ticks %v, want a@14:03:00 alone", got)
	}
	check("a at +90s", a.NextTick("acme", "minutely", sc, clkA.Now()), st0.Add(2*time.Minute))
	// b, standing by, counts from a's tick, not from its own start
	check("b at +90s", b.NextTick("acme", "minutely", sc, clkB.Now()), st0.Add(2*time.Minute))
	// a process that runs no scheduler (nexus status) reads the record
	check("nexus status at +90s", scheduler.NextTick(e.dir, "acme", "minutely", sc, clkB.Now()), st0.Add(2*time.Minute))
	// with the record behind (no process ticked for a while), nexus status
	// says the next time of the last tick plus whole periods, where a
	// server (re)started meanwhile ticks
	late := st0.Add(10*time.Minute + 20*time.Second)
	check("nexus status at +10m20s", scheduler.NextTick(e.dir, "acme", "minutely", sc, late), st0.Add(11*time.Minute))
	// and with no record at all
	check("nexus status, no record", scheduler.NextTick(t.TempDir(), "acme", "minutely", sc, clkB.Now()), clkB.Now().Add(time.Minute))
}

// TestNextTickOfACronExpression: a cron expression's next time is the
// same for every process, whatever ticked before.
func TestNextTickOfACronExpression(t *testing.T) {
	e := newEnv(t)
	ls := e.publish(cronFlow("acme", "quarterly", "*/15 * * * *", "", ""))
	lf, _ := ls.Lookup("acme", "quarterly")
	sc := lf.Flow.Schedule()
	clk := clocktest.New(st0)
	s := e.start("a", clk, time.Second)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, at(16, 30), 2000)
	want := at(30, 0)
	if got := s.NextTick("acme", "quarterly", sc, clk.Now()); !got.Equal(want) {
		t.Errorf("Scheduler.NextTick = %v, want %v", got, want)
	}
	if got := scheduler.NextTick(e.dir, "acme", "quarterly", sc, clk.Now()); !got.Equal(want) {
		t.Errorf("NextTick = %v, want %v", got, want)
	}
}

// TestNextTickAfterATakeoverAtAPoll: b stands by an @every 1m
// flow that a holds (a's times are :00, b's :20). a ticks 14:04:00 and
// stops; b takes the lock at its 14:04:10 poll (its pending 14:03:20 was
// ticked, the record says). Its next tick is 14:05:00 (a period after the
// record: fire defers its own 14:04:20), and NextTick says so while b
// stands by and once it holds the flow. It showed b's own 14:04:20, never
// ticked, once b held the flow.
func TestNextTickAfterATakeoverAtAPoll(t *testing.T) {
	e := newEnv(t)
	ls := e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	lf, _ := ls.Lookup("acme", "minutely")
	sc := lf.Flow.Schedule()
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepEarliest(t) // 14:03:00: a ticks
	clkB := clocktest.New(at(2, 20))
	b := e.start("b", clkB, 10*time.Second)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, at(3, 50), 100) // refused at 14:03:20: pending
	clkA.StepEarliest(t)              // 14:04:00: a ticks
	clkB.StepUntil(t, at(4, 0), 100)
	if got, want := b.NextTick("acme", "minutely", sc, clkB.Now()), at(5, 0); !got.Equal(want) {
		t.Errorf("b standing by at 14:04:00: NextTick %v, want %v", hhmmss(got), hhmmss(want))
	}
	a.Stop()
	now := clkB.StepEarliest(t) // 14:04:10: b takes over
	if !e.lockHeld("acme", "minutely") {
		t.Fatalf("b has not taken the lock at %v", hhmmss(now))
	}
	shown := b.NextTick("acme", "minutely", sc, now)
	clkB.StepUntil(t, at(6, 30), 100)
	want := []string{"a@14:03:00", "a@14:04:00", "b@14:05:00", "b@14:06:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	if !shown.Equal(at(5, 0)) {
		t.Errorf("b, holding the flow at %v: NextTick %v, but its next tick is 14:05:00", hhmmss(now), hhmmss(shown))
	}
}

// TestNextTickConcurrent: NextTick from other goroutines (HTTP
// handlers) while the loop runs, a takeover and a publication happen (run
// with -race).
func TestNextTickConcurrent(t *testing.T) {
	e := newEnv(t)
	ls := e.publish(cronFlow("acme", "f", "@every 10s", "", ""), cronFlow("acme", "g", "*/5 * * * *", "Europe/Berlin", ""))
	clk := clocktest.New(st0)
	a := e.start("a", clk, time.Second)
	b := e.start("b", clk, time.Second)
	clk.WaitCalls(t, 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []*scheduler.Scheduler{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, name := range []string{"f", "g"} {
					lf, _ := e.live.Live().Lookup("acme", name)
					if lf.Flow != nil && lf.Flow.Schedule() != nil {
						s.NextTick("acme", name, lf.Flow.Schedule(), clk.Now())
						scheduler.NextTick(e.dir, "acme", name, lf.Flow.Schedule(), clk.Now())
					}
				}
			}
		}()
	}
	_ = ls
	clk.StepUntil(t, st0.Add(time.Minute), 200)
	e.publish(cronFlow("acme", "f", "@every 20s", "", ""), cronFlow("acme", "g", "*/5 * * * *", "Europe/Berlin", ""))
	clk.StepUntil(t, st0.Add(2*time.Minute), 200)
	close(stop)
	wg.Wait()
}

func hhmmss(t time.Time) string { return t.UTC().Format(time.TimeOnly) }
