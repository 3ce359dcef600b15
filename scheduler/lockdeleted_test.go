package scheduler_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A flow's cron lock deleted by hand while a process holds it (taken for a
// stale lock): the holder locks the file at the path again at its next
// pass, so that no other process finds it free and ticks the flow too, and
// says so. It held its lock on the deleted file, which excludes no one.
func TestCronLockDeletedIsLockedAgain(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	_, clk := e.startAt("a", st0, 10*time.Second)
	clk.StepUntil(t, at(3, 0), 10)
	if !e.lockHeld("acme", "minutely") {
		t.Fatal("a does not hold the flow's lock after its tick")
	}
	path := filepath.Join(e.dir, "acme", "minutely.lock")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.StepEarliest(t) // a poll
	if !e.lockHeld("acme", "minutely") {
		t.Error("the file at the lock's path is free after the holder's next poll: another process would tick the flow too")
	}
	if ev := logs.Events(t, "cron_lock_replaced"); len(ev) != 1 || ev[0]["file"] != path {
		t.Errorf("cron_lock_replaced events = %v, want one naming %s", ev, path)
	}
	clk.StepUntil(t, at(5, 0), 20)
	if got, want := tickTimes(e.ticks.all()), []string{"a@14:03:00", "a@14:04:00", "a@14:05:00"}; !cmp.Equal(got, want) {
		t.Errorf("ticks = %v, want %v", got, want)
	}
}

// A flow's cron lock deleted while process a holds it, and process b takes
// the file made again: a stands by at its next pass, so that one process
// ticks the flow. a's tick whose append kept failing (its record made) was
// queued by b when b took the flow over, and a queued it too once its
// append went through: the tick was delivered twice.
func TestCronLockDeletedAndTakenElsewhereStandsBy(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	_, clkA := e.startAt("a", st0, 10*time.Second)
	clkA.StepUntil(t, at(3, 0), 10)
	_, clkB := e.startAt("b", at(3, 0), 10*time.Second)
	e.ticks.mu.Lock()
	e.ticks.fail = func(k tick) error {
		if k.Sched == "a" {
			return os.ErrDeadlineExceeded // a full disk, say
		}
		return nil
	}
	e.ticks.mu.Unlock()
	clkA.StepUntil(t, at(4, 0), 10) // a records 14:04, its append fails
	path := filepath.Join(e.dir, "acme", "minutely.lock")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clkB.StepUntil(t, at(4, 10), 20) // b takes the new file at its first poll and queues a's 14:04
	e.ticks.mu.Lock()
	e.ticks.fail = nil
	e.ticks.mu.Unlock()
	clkA.StepEarliest(t) // a's poll: 14:04:10
	clkB.StepUntil(t, at(5, 0), 20)
	clkA.StepUntil(t, at(5, 0), 20)

	var got []string
	for _, k := range e.ticks.all() {
		got = append(got, k.Sched+"@"+k.At.UTC().Format("15:04:05")+":"+k.Msg.CorrelationID)
	}
	want := []string{"a@14:03:00:a-1", "b@14:03:10:a-2", "b@14:05:00:b-1"}
	if !cmp.Equal(got, want) {
		t.Errorf("ticks (process@clock:correlation ID) = %v, want %v", got, want)
	}
	found := false
	for _, ev := range logs.Events(t, "cron_failed") {
		if s, _ := ev["error"].(string); strings.Contains(s, path) {
			found = true
		}
	}
	if !found {
		t.Errorf("no cron_failed line names %s: %v", path, logs.Events(t, "cron_failed"))
	}
}
