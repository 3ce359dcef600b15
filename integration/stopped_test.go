package integration

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestCronStoppedHolderNotReplaced: the process that ticks a cron flow,
// stopped with SIGSTOP, keeps its lock, so the other process on the same
// state directory does not take the flow over while it is paused (a paused
// holder resuming next to a new one would tick twice); once continued, the
// holder ticks again and the other still does not. docs/decisions.md says
// why and what to do with a stuck process (kill it: the other takes over,
// as TestCronTwoProcessesOneTick shows).
func TestCronStoppedHolderNotReplaced(t *testing.T) {
	t.Parallel()
	be, h1, h2 := twoCronProcesses(t)
	// the tick reached the backend; its process's log line may follow
	eventually(t, 5*time.Second, "a cron_tick in the log of one process", func() bool {
		return len(h1.events("cron_tick"))+len(h2.events("cron_tick")) > 0
	})
	holder, other := h1, h2
	if len(h2.events("cron_tick")) > 0 {
		holder, other = h2, h1
	}
	if n := len(other.events("cron_tick")); n != 0 {
		t.Fatalf("both processes ticked before the stop: %d and %d cron_tick events", len(holder.events("cron_tick")), n)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { holder.cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(4 * time.Second) // four periods, and four of the other's polls (1 s)
	if n := len(other.events("cron_tick")); n != 0 {
		t.Errorf("the other process ticked %d times while the holder was stopped; want none (the stopped holder keeps its lock)", n)
	}
	// what reached the backend meanwhile: at most the one tick the holder
	// had sent when it was stopped (its worker delivers one message at a
	// time), read by the backend however late; which tick it is, the
	// holder's log says once it runs again
	during := ticksSince(be, stopped)
	if len(during) > 1 {
		t.Errorf("%d ticks reached the backend while the holder was stopped, want at most the one it had sent", len(during))
	}

	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually(t, 10*time.Second, "a tick of the resumed holder at the backend", func() bool {
		return len(ticksSince(be, resumed)) > 0
	})
	// the tick read while the holder was stopped is one it made before
	for _, x := range during {
		cid := x.header.Get("X-Correlation-Id")
		ev := waitEvents(t, holder, "cron_tick", 1, field("correlation_id", cid), 10*time.Second)[0]
		if at, err := time.Parse(time.RFC3339, fmt.Sprint(ev["scheduled_for"])); err != nil || at.After(stopped) {
			t.Errorf("the tick that reached the backend while the holder was stopped was made for %v (%v), after the stop at %s",
				ev["scheduled_for"], err, stopped.UTC().Format(time.RFC3339Nano))
		}
	}
	if n := len(other.events("cron_tick")); n != 0 {
		t.Errorf("the other process ticked %d times after the holder resumed; want none", n)
	}
}
