package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/scheduler"
)

// tickIDs lists the ticks as "process@hh:mm:ss correlation-id".
func tickIDs(ticks []tick) []string {
	var out []string
	for _, k := range ticks {
		out = append(out, k.Sched+"@"+k.At.UTC().Format("15:04:05")+" "+k.Msg.CorrelationID)
	}
	return out
}

// TestTakeoverQueuesATickNeverQueued: a tick recorded by a process that
// went before appending it is queued, with its correlation ID, by the
// process that takes the flow over, unless a later tick is due by then,
// which stands for it (and the lost one is logged). Here process a's
// appends fail until it stops, which leaves the record a kill between the
// record and the append leaves.
func TestTakeoverQueuesATickNeverQueued(t *testing.T) {
	cases := []struct {
		name     string
		bUntil   time.Time // b stands by until then; a stops, and b polls
		want     []string  // the ticks until 14:05:30
		wantLost bool      // b logs a's tick as lost
	}{{
		name:   "taken over before the next tick is due: queued by b",
		bUntil: at(3, 20),
		want:   []string{"b@14:03:30 a-1", "b@14:04:00 b-1", "b@14:05:00 b-2"},
	}, {
		name:     "taken over once the next tick is due: that one stands for it",
		bUntil:   at(4, 0),
		want:     []string{"b@14:04:10 b-1", "b@14:05:00 b-2"},
		wantLost: true,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
			e.ticks.fail = func(k tick) error {
				if k.Sched == "a" {
					return errors.New("no space left on device")
				}
				return nil
			}
			clkA := clocktest.New(st0)
			a := e.start("a", clkA, time.Hour)
			clkA.WaitCalls(t, 1)
			clkA.StepUntil(t, at(3, 0), 10) // a records 14:03 and fails to queue it
			if got := e.lastRecord("acme", "minutely"); !got.Equal(at(3, 0)) {
				t.Fatalf("a's record is %v, want 14:03", got)
			}
			clkB := clocktest.New(st0)
			e.start("b", clkB, 10*time.Second)
			clkB.WaitCalls(t, 1)
			clkB.StepUntil(t, c.bUntil, 100)
			a.Stop()
			clkB.StepUntil(t, at(5, 30), 100)
			if diff := cmp.Diff(c.want, tickIDs(e.ticks.all())); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			lost := 0
			for _, ev := range logs.Events(t, "cron_failed") {
				if ev["correlation_id"] == "a-1" && ev["scheduled_for"] == "2026-08-09T14:03:00Z" {
					lost++
				}
			}
			// a logs it twice (the failed append, and its stop); b once
			// when a later tick stands for it
			if want := map[bool]int{false: 2, true: 3}[c.wantLost]; lost != want {
				t.Errorf("%d cron_failed lines name a's tick, want %d; log:\n%s", lost, want, logs)
			}
			resumed := 0
			for _, ev := range logs.Events(t, "cron_tick") {
				if ev["resumed"] == true {
					resumed++
				}
			}
			if want := map[bool]int{false: 1, true: 0}[c.wantLost]; resumed != want {
				t.Errorf("%d cron_tick lines with resumed, want %d", resumed, want)
			}
		})
	}
}

// TestRestartQueuesATickNeverQueued runs a scheduler over a real queue
// after a process was killed with its last tick recorded: the tick is
// queued if the log does not hold it, once, with the correlation ID the
// record names; not if the log holds it, nor if the record is an older
// version's (the time alone), which cannot tell, nor when the host comes
// back long after the tick (a daily tick is not replayed in the evening).
func TestRestartQueuesATickNeverQueued(t *testing.T) {
	const cid = "5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10"
	const rec = "1786284120000000000            \n1 " + cid + "\n" // the tick at 14:02:00
	cases := []struct {
		name      string
		spec      string        // the flow's schedule; default every minute
		after     time.Duration // the restart, after the tick at 14:02:00
		appended  bool          // the killed process appended the tick
		record    string        // the record it left
		wantTotal int64         // messages in the log after the restart's first polls
	}{
		{name: "killed between the record and the append", record: rec, wantTotal: 1},
		{name: "killed after the append", appended: true, record: rec, wantTotal: 1},
		{name: "an older version's record", record: "1786284120000000000\n", wantTotal: 0},
		{name: "the record of a version that wrote one line", record: "1786284120000000000 1 " + cid + "\n", wantTotal: 1},
		{name: "a daily tick, the host back hours later", spec: "2 14 * * *", after: 8 * time.Hour, record: rec, wantTotal: 0},
		{name: "a daily tick, the host back within a minute", spec: "2 14 * * *", record: rec, wantTotal: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			spec := c.spec
			if spec == "" {
				spec = "* * * * *"
			}
			e.publish(cronFlow("acme", "minutely", spec, "", ""))
			root := filepath.Join(filepath.Dir(e.dir), "queues")
			start := st0.Add(c.after + 20*time.Second)
			clk := clocktest.New(start)
			// a handler that holds its delivery until the manager stops, so
			// that the log keeps what was appended
			m := queue.NewManager(queue.ManagerConfig{Root: root, Clock: clk, Logger: quietLog(), Poll: time.Hour, Now: clk.Now,
				StopGrace: 10 * time.Millisecond, SweepEvery: time.Hour,
				Handler: queue.HandlerFunc(func(ctx context.Context, _ queue.Delivery) queue.Verdict {
					<-ctx.Done()
					return queue.Verdict{Kind: queue.VerdictRetry, Error: "stopped"}
				})})
			t.Cleanup(m.Stop)
			if c.appended {
				if _, err := m.Append("acme", "minutely", queue.NewMessage{Source: scheduler.Source, CorrelationID: cid, Payload: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(e.dir, "acme"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.dir, "acme", "minutely.last"), []byte(c.record), 0o600); err != nil {
				t.Fatal(err)
			}
			var n int
			s := scheduler.New(scheduler.Config{Live: e.live, Queues: m, Dir: e.dir, Clock: clk, Logger: quietLog(),
				Poll: 10 * time.Second, NewID: func() string { n++; return fmt.Sprint("new-", n) }})
			s.Start()
			t.Cleanup(s.Stop)
			// the scheduler's polls, every 10 s, before the next tick: each
			// step waits for the scheduler's own wait, so that the worker
			// the resumed tick starts, a second waiter on the clock, never
			// moves it on (stepping to the earliest deadline, the clock
			// once went to the worker's and past the tick, queued too)
			end := start.Add(30 * time.Second)
			for at := start.Add(10 * time.Second); !at.After(end); at = at.Add(10 * time.Second) {
				clk.WaitDeadline(t, at)
				clk.AdvanceTo(at)
			}
			clk.WaitDeadline(t, end.Add(10*time.Second)) // the last poll's pass is over
			// the worker the resumed tick starts is a second waiter on the
			// clock, which can count for the scheduler's own in a step: the
			// scheduler may still be appending when the steps are over
			deadline := time.Now().Add(10 * time.Second)
			counts, err := queue.ReadCounts(root, "acme", "minutely", nil)
			for err == nil && counts.Total < c.wantTotal && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				counts, err = queue.ReadCounts(root, "acme", "minutely", nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if counts.Total != c.wantTotal {
				t.Errorf("the log holds %d messages, want %d", counts.Total, c.wantTotal)
			}
			if p, err := m.Appended("acme", "minutely", 1, cid); err != nil || (p == queue.Present) != (c.wantTotal == 1) {
				t.Errorf("Appended(the tick) = %v, %v", p, err)
			}
		})
	}
}
