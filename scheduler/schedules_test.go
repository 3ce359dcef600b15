package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nexushq/nexus/registry"
)

// LiveSet.Schedules lists the cron flows of a live set with their next
// tick, in each schedule's zone, sorted by tenant and flow.
func TestLiveSetSchedules(t *testing.T) {
	e := newEnv(t)
	ls := e.publish(
		cronFlow("beta", "report", "0 9 * * 1-5", "America/New_York", ""),
		flowSrc("acme", "plain", ""),
		cronFlow("acme", "ping", "@every 30s", "", ""),
		cronFlow("acme", "nightly", "30 2 * * *", "Europe/Berlin", `{"full": true}`),
	)
	now := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) // a Saturday, the eve of Berlin's change
	want := []registry.Schedule{
		// 29 March has no 02:30 in Berlin: a fixed-time schedule ticks
		// right after the jump, at 03:00 CEST (docs: Daylight saving)
		{Tenant: "acme", Flow: "nightly", Spec: "30 2 * * *", Zone: "Europe/Berlin", Next: time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)},
		{Tenant: "acme", Flow: "ping", Spec: "@every 30s", Zone: "UTC", Next: now.Add(30 * time.Second)},
		// Monday 09:00 in New York, already on EDT (UTC−4)
		{Tenant: "beta", Flow: "report", Spec: "0 9 * * 1-5", Zone: "America/New_York", Next: time.Date(2026, 3, 30, 13, 0, 0, 0, time.UTC)},
	}
	for _, asked := range []time.Time{now, now.In(time.FixedZone("JST", 9*3600))} {
		got := ls.Schedules(asked, nil)
		if len(got) != len(want) {
			t.Fatalf("Schedules(%v) = %+v, want %d entries", asked, got, len(want))
		}
		for i, s := range got {
			w := want[i]
			if s.Tenant != w.Tenant || s.Flow != w.Flow || s.Spec != w.Spec || s.Zone != w.Zone || !s.Next.Equal(w.Next) {
				t.Errorf("Schedules(%v)[%d] = %+v, want %+v", asked, i, s, w)
			}
			if loc := s.Next.Location().String(); loc != w.Zone {
				t.Errorf("%s/%s: Next is given in %s, want the schedule's zone %s", s.Tenant, s.Flow, loc, w.Zone)
			}
		}
	}
	if got := fmt.Sprint(ls.Schedules(now, nil)[0].Next); got != "2026-03-29 03:00:00 +0200 CEST" {
		t.Errorf("nightly's next tick reads %s", got)
	}

	// a set without cron flows has none
	if got := e.publish(flowSrc("acme", "plain", "")).Schedules(now, nil); len(got) != 0 {
		t.Errorf("Schedules without cron flows = %+v", got)
	}
}
