package scheduler_test

import (
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// waitRest waits until the scheduler waits on clk (n After calls with
// d > 0) and reports false if, meanwhile, it went round its loop without
// waiting (After(0)) more than 1000 times: it spins.
func waitRest(t *testing.T, clk *clocktest.Fake, n int) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if clk.Calls() >= n {
			return true
		}
		if clk.AllCalls()-clk.Calls() > 1000 {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// TestChathamStartInsideTheFallBackWindow: on 2026-04-04 Pacific/Chatham
// falls back from 03:45 (+1345) to 02:45 (+1245); between 14:00 and 14:15
// UTC robfig/cron's Next answers 13:15 UTC, a time in the past
// (TestChathamFallBackDoesNotSpin covers a process running before). A
// process that started then, or a flow published then, took that past
// time for its next one: it ticked at once a time that passed before it
// followed the flow (a missed tick replayed), then, its next time staying
// in the past, waited 0 at every pass until 14:15: it spun.
func TestChathamStartInsideTheFallBackWindow(t *testing.T) {
	for _, c := range []struct {
		name    string
		publish bool // published while the process runs, rather than before it starts
	}{{"start", false}, {"publication", true}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			src := cronFlow("acme", "nightly", "0 3 * * *", "Pacific/Chatham", "")
			start := time.Date(2026, 4, 4, 14, 5, 0, 0, time.UTC)
			clk := clocktest.New(start)
			if c.publish {
				e.publish(cronFlow("acme", "other", "0 9 * * *", "", ""))
			} else {
				e.publish(src)
			}
			e.start("a", clk, time.Minute)
			if c.publish {
				clk.WaitCalls(t, 1)
				e.publish(src)
			}
			n := clk.Calls()
			if c.publish {
				clk.Advance(time.Minute) // 14:06, the pass that finds the flow
				n++
			}
			if !waitRest(t, clk, n+1) && clk.AllCalls()-clk.Calls() > 1000 {
				t.Errorf("the scheduler spins at %v: %d passes without waiting", clk.Now().UTC(), clk.AllCalls()-clk.Calls())
			}
			if got := tickTimes(e.ticks.all()); len(got) != 0 {
				t.Errorf("ticks before 14:15 UTC %v, want none: 13:15 UTC passed before the flow was followed", got)
			}
		})
	}
}
