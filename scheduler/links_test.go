package scheduler_test

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/scheduler"
)

// TestSchedulerRefusesLinks: a symbolic link planted in the cron folder
// where a tenant's folder would be (to a folder outside the state
// directory, or to nothing) keeps that tenant's flows from ticking, logs
// cron_failed naming the link at the due time, and creates nothing through
// it: neither the lock nor the last-tick record.
func TestSchedulerRefusesLinks(t *testing.T) {
	for _, target := range []string{"outside", "dangling"} {
		t.Run(target, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "nightly", "@every 30s", "", ""), cronFlow("globex", "nightly", "@every 30s", "", ""))
			to := t.TempDir()
			if target == "dangling" {
				to = filepath.Join(to, "nothing-here")
			}
			link := filepath.Join(e.dir, "acme")
			if err := os.MkdirAll(e.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(to, link); err != nil {
				t.Fatal(err)
			}
			logs := runLogged(t, e, 65*time.Second)

			for _, k := range e.ticks.all() {
				if k.Tenant == "acme" {
					t.Errorf("acme ticked through a linked cron folder: %v", k)
				}
			}
			if got := len(e.ticks.all()); got != 2 {
				t.Errorf("%d ticks, want globex's 2 (at +30 s and +60 s): %v", got, e.ticks.all())
			}
			evs := logs.Events(t, "cron_failed")
			if len(evs) == 0 {
				t.Fatalf("no cron_failed event; log:\n%s", logs.String())
			}
			if msg, _ := evs[0]["error"].(string); !strings.Contains(msg, link+" is a symbolic link") || evs[0]["tenant"] != "acme" {
				t.Errorf("cron_failed %v, want acme's naming the link %s", evs[0], link)
			}
			if target == "dangling" {
				if _, err := os.Lstat(to); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the dangling link's target was created: %v", err)
				}
			} else if entries, err := os.ReadDir(to); err != nil || len(entries) != 0 {
				t.Errorf("the link's target holds %v (%v), want nothing created through the link", entries, err)
			}
		})
	}
}

// TestSchedulerRefusesALinkedLastTickRecord: a symbolic link planted where
// a flow's last-tick record would be, to a file holding a far-future time,
// is not read as the record (it would silence the flow without a word):
// the flow does not tick, cron_failed names the link at each due time, and
// the link's target is neither read as a time nor written.
func TestSchedulerRefusesALinkedLastTickRecord(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "nightly", "@every 30s", "", ""), cronFlow("acme", "plain", "@every 30s", "", ""))
	outside := filepath.Join(t.TempDir(), "elsewhere")
	const far = "4102444800000000000\n" // 2100-01-01
	if err := os.WriteFile(outside, []byte(far), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(e.dir, "acme", "nightly.last")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	logs := runLogged(t, e, 65*time.Second)

	for _, k := range e.ticks.all() {
		if k.Flow == "nightly" {
			t.Errorf("nightly ticked through a linked last-tick record: %v", k)
		}
	}
	if got := len(e.ticks.all()); got != 2 {
		t.Errorf("%d ticks, want plain's 2 (at +30 s and +60 s): %v", got, e.ticks.all())
	}
	// one naming the link at each of nightly's due times (each tick is
	// then tried again at every poll and, when the next is due or the
	// scheduler stops, logged as lost)
	var evs []map[string]any
	for _, ev := range logs.Events(t, "cron_failed") {
		if ev["error"] != nil {
			evs = append(evs, ev)
		}
	}
	if len(evs) != 2 {
		t.Fatalf("%d cron_failed events with an error, want one at each of nightly's 2 due times; log:\n%s", len(evs), logs.String())
	}
	if msg, _ := evs[0]["error"].(string); !strings.Contains(msg, link+" is a symbolic link") || evs[0]["flow"] != "nightly" {
		t.Errorf("cron_failed %v, want nightly's naming the link %s", evs[0], link)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != far {
		t.Errorf("the link's target holds %q (%v), want it untouched", b, err)
	}
}

// runLogged runs one scheduler over e for d of a fake clock from st0, and
// returns its log.
func runLogged(t *testing.T, e *env, d time.Duration) *jsonlogtest.Buffer {
	t.Helper()
	logs := &jsonlogtest.Buffer{}
	clk := clocktest.New(st0)
	var n int
	s := scheduler.New(scheduler.Config{
		Live: e.live, Queues: &appender{name: "p1", clk: clk, log: e.ticks}, Dir: e.dir, Clock: clk,
		Logger: logs.Logger(slog.LevelInfo), NewID: func() string { n++; return fmt.Sprint(n) },
	})
	s.Start()
	t.Cleanup(s.Stop)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, st0.Add(d), 200)
	s.Stop()
	return logs
}
