package scheduler_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/scheduler"
)

// askedQueues is a Manager that notes the clock's time at each Appended.
type askedQueues struct {
	*queue.Manager
	clk *clocktest.Fake
	mu  sync.Mutex
	at  []time.Time
}

func (a *askedQueues) Appended(tenant, flow string, from uint64, cid string) (queue.Presence, error) {
	a.mu.Lock()
	a.at = append(a.at, a.clk.Now())
	a.mu.Unlock()
	return a.Manager.Appended(tenant, flow, from, cid)
}

// A process taking a flow over, while another process holds the flow's
// queue's append lock (paused while it appends), does not wait for it as
// long as the pause lasts: its check of the last tick the process before
// recorded gives up after the manager's LockWait, is logged once, and is
// tried again at every poll; once the lock is let go the tick is queued
// (before the next tick is due), and if it is held until the next tick
// is due, that one stands for it and the old one is logged as lost. A
// pass asks once, and the scheduler stops while the lock is still held.
func TestResumeWithTheAppendLockHeld(t *testing.T) {
	const cid = "5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10"
	const rec = "1786284120000000000            \n1 " + cid + "\n" // the tick at 14:02:00
	for _, c := range []struct {
		name      string
		releaseAt time.Time // the lock is let go once the clock is there; zero: never
		want      int64     // messages in the log at 14:02:55
		wantLost  bool
	}{
		{name: "let go before the next tick: the tick is queued", releaseAt: at(2, 45), want: 1},
		{name: "held past the next tick: it is lost", wantLost: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
			root := filepath.Join(filepath.Dir(e.dir), "queues")
			if err := queue.MakeDir(nil, root, "acme", "minutely"); err != nil {
				t.Fatal(err)
			}
			lockPath := filepath.Join(root, "acme", "minutely", "append.lock")
			lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			released := false
			release := func() {
				if !released {
					released = true
					lock.Close()
				}
			}
			start := st0.Add(20 * time.Second)
			clk := clocktest.New(start)
			m := queue.NewManager(queue.ManagerConfig{Root: root, Clock: clk, Logger: quietLog(), Poll: time.Hour, Now: clk.Now,
				StopGrace: 10 * time.Millisecond, SweepEvery: time.Hour, LockWait: 20 * time.Millisecond,
				Handler: queue.HandlerFunc(func(ctx context.Context, _ queue.Delivery) queue.Verdict {
					<-ctx.Done()
					return queue.Verdict{Kind: queue.VerdictRetry, Error: "stopped"}
				})})
			t.Cleanup(m.Stop)
			if err := os.MkdirAll(filepath.Join(e.dir, "acme"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.dir, "acme", "minutely.last"), []byte(rec), 0o600); err != nil {
				t.Fatal(err)
			}
			asked := &askedQueues{Manager: m, clk: clk}
			s := scheduler.New(scheduler.Config{Live: e.live, Queues: asked, Dir: e.dir, Clock: clk, Logger: e.log,
				Poll: 5 * time.Second, NewID: func() string { return "new" }})
			s.Start()
			t.Cleanup(s.Stop)
			t.Cleanup(release) // before the stops, should one hang
			clk.WaitCalls(t, 1)
			if !c.releaseAt.IsZero() {
				clk.StepUntil(t, c.releaseAt, 100)
				if n := len(logs.Events(t, "cron_resume_deferred")); n != 1 {
					t.Errorf("%d cron_resume_deferred lines while the lock was held over several polls, want 1; log:\n%s", n, logs)
				}
				if counts, err := queue.ReadCounts(root, "acme", "minutely", nil); err != nil || counts.Total != 0 {
					t.Errorf("the log holds %d messages while the lock was held (%v), want 0", counts.Total, err)
				}
				release()
				clk.StepUntil(t, at(2, 55), 100)
				deadline := time.Now().Add(10 * time.Second)
				counts, err := queue.ReadCounts(root, "acme", "minutely", nil)
				for err == nil && counts.Total < c.want && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
					counts, err = queue.ReadCounts(root, "acme", "minutely", nil)
				}
				if err != nil || counts.Total != c.want {
					t.Errorf("the log holds %d messages (%v), want %d", counts.Total, err, c.want)
				}
				if p, err := m.Appended("acme", "minutely", 1, cid); err != nil || p != queue.Present {
					t.Errorf("Appended(the tick) = %v, %v; want present", p, err)
				}
			} else {
				clk.StepUntil(t, at(3, 5), 100)
				if n := len(logs.Events(t, "cron_resume_deferred")); n != 1 {
					t.Errorf("%d cron_resume_deferred lines while the lock was held over several polls, want 1; log:\n%s", n, logs)
				}
			}
			lost := 0
			for _, ev := range logs.Events(t, "cron_failed") {
				if ev["correlation_id"] == cid {
					lost++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[c.wantLost]; lost != want {
				t.Errorf("%d cron_failed lines name the tick, want %d; log:\n%s", lost, want, logs)
			}
			// once a pass: a pass waits LockWait at most for the lock
			asked.mu.Lock()
			for i := 1; i < len(asked.at); i++ {
				if asked.at[i].Equal(asked.at[i-1]) {
					t.Errorf("the queue was asked twice in the pass at %v", asked.at[i].Format("15:04:05"))
				}
			}
			asked.mu.Unlock()
			stopped := make(chan struct{})
			go func() { s.Stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				t.Fatal("the scheduler did not stop within 10 s while another process held the append lock")
			}
		})
	}
}
