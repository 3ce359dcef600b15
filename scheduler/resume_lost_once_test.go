package scheduler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestTickNeverQueuedIsLoggedLostOnce: a tick recorded by a process that
// went before appending it, found too old to queue (or standing for by a
// later tick due) by the process that takes the flow over, is logged as
// lost once: that process writes the record again as the time alone,
// which finishes nothing. The record kept naming it, and every process
// taking the flow up after (each restart before the next tick) logged the
// same tick as lost again, as if another had been lost.
func TestTickNeverQueuedIsLoggedLostOnce(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "hourly", "0 * * * *", "", ""))
	e.ticks.fail = func(k tick) error {
		if k.Sched == "a" {
			return errors.New("no space left on device")
		}
		return nil
	}
	hour := func(mm int) time.Time { return time.Date(2026, 8, 9, 15, mm, 0, 0, time.UTC) }
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Minute)
	clkA.WaitCalls(t, 1)
	clkA.StepUntil(t, hour(0), 100) // a records 15:00 and fails to queue it
	a.Stop()
	// b starts two minutes later: too late to queue it
	clkB := clocktest.New(hour(2))
	b := e.start("b", clkB, time.Second)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, hour(3), 100)
	b.Stop()
	// c, a minute later still
	clkC := clocktest.New(hour(4))
	e.start("c", clkC, time.Second)
	clkC.WaitCalls(t, 1)
	clkC.StepUntil(t, hour(5), 100)
	var lost []map[string]any
	for _, ev := range logs.Events(t, "cron_failed") {
		if strings.Contains(ev["msg"].(string), "never queued") {
			lost = append(lost, ev)
		}
	}
	if len(lost) != 1 || lost[0]["scheduled_for"] != "2026-08-09T15:00:00Z" || lost[0]["correlation_id"] != "a-1" {
		t.Errorf("cron_failed lines of a tick never queued: %v, want one, of a's 15:00 (a-1)", lost)
	}
	if got := e.ticks.all(); len(got) != 0 {
		t.Errorf("ticks %v, want none: 15:00 is lost, 16:00 not due", got)
	}
}
