package scheduler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// TestTickLostWithItsWithdrawnFlowStaysLost: a tick whose append failed
// and whose flow is withdrawn before a retry goes through is logged as
// lost, and stays lost: when the flow is published again, by this process
// or another, soon after, it is not queued as the last tick the process
// before recorded and never queued. Its record still named it, and a
// re-publication within the period queued it ("resumed"), after the log
// had said it was lost.
func TestTickLostWithItsWithdrawnFlowStaysLost(t *testing.T) {
	for _, again := range []string{"same process", "another process"} {
		t.Run(again, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "nightly", "@every 30s", "", ""))
			failing := true
			e.ticks.fail = func(tick) error {
				if failing {
					return queue.ErrBudget
				}
				return nil
			}
			clk := clocktest.New(st0)
			s := e.start("p1", clk, time.Second)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, st0.Add(32*time.Second), 100) // +30 s: the append fails
			e.publish()                                    // the flow is withdrawn
			clk.StepUntil(t, st0.Add(34*time.Second), 100)
			e.ticks.mu.Lock()
			failing = false
			e.ticks.mu.Unlock()
			e.publish(cronFlow("acme", "nightly", "@every 30s", "", "")) // and published again
			if again == "another process" {
				s.Stop()
				clk = clocktest.New(st0.Add(35 * time.Second))
				e.start("p2", clk, time.Second)
				clk.WaitCalls(t, 1)
			}
			clk.StepUntil(t, st0.Add(40*time.Second), 100)
			for _, k := range e.ticks.all() {
				t.Errorf("tick %v (%s) queued before the next one was due: the +30 s tick was logged as lost", k, k.Msg.CorrelationID)
			}
			lost := 0
			for _, ev := range logs.Events(t, "cron_failed") {
				if strings.Contains(ev["msg"].(string), "it is lost") {
					lost++
				}
			}
			if lost != 1 {
				t.Errorf("%d cron_failed lines say the +30 s tick is lost, want 1", lost)
			}
		})
	}
}
