package integration

import (
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
	if n := len(ticksSince(be, stopped.Add(500*time.Millisecond))); n != 0 {
		t.Errorf("%d ticks reached the backend while the holder was stopped, want none", n)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually(t, 5*time.Second, "a tick of the resumed holder at the backend", func() bool {
		return len(ticksSince(be, resumed)) > 0
	})
	if n := len(other.events("cron_tick")); n != 0 {
		t.Errorf("the other process ticked %d times after the holder resumed; want none", n)
	}
}
