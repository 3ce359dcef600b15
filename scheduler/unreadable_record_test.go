package scheduler_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTickWhoseRecordCannotBeReadIsTriedAgain: a due tick whose .last
// record cannot be read (here a symbolic link where it should be, which
// the state directory refuses; an I/O error alike) appends nothing and is
// tried again at every poll, as one whose record cannot be written is,
// until the record reads, then recorded and appended; the cron_failed
// line names the tick. It was skipped at once, with a line that did not
// say which tick was lost.
func TestTickWhoseRecordCannotBeReadIsTriedAgain(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	_, clk := e.startAt("a", st0, time.Second)
	clk.StepUntil(t, at(3, 30), 200) // 14:03 ticks
	record := filepath.Join(e.dir, "acme", "minutely.last")
	saved := filepath.Join(t.TempDir(), "saved.last")
	if err := os.Rename(record, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(saved, record); err != nil {
		t.Fatal(err)
	}
	clk.StepUntil(t, at(4, 20), 200) // 14:04: the record cannot be read, nor at the polls after
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(saved, record); err != nil {
		t.Fatal(err)
	}
	clk.StepUntil(t, at(4, 30), 200) // 14:04 recorded and appended at the next poll
	want := []string{"a@14:03:00", "a@14:04:21"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	failed := logs.Events(t, "cron_failed")
	if len(failed) != 1 || failed[0]["scheduled_for"] != "2026-08-09T14:04:00Z" || !strings.Contains(failed[0]["error"].(string), "symbolic link") {
		t.Errorf("cron_failed lines %v, want one naming the tick of 14:04 and the link", failed)
	}
	ticks := logs.Events(t, "cron_tick")
	if len(ticks) != 2 || ticks[1]["scheduled_for"] != "2026-08-09T14:04:00Z" {
		t.Errorf("cron_tick lines %v, want the second for 14:04", ticks)
	}
}
