package host_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/registry"
)

// TestAPIRefusalsCarryNoStoreAndNosniff: docs/management.md, API: "All
// answers but a payload's download are JSON, with Cache-Control: no-store
// (they hold payloads) and X-Content-Type-Options: nosniff", refusals
// included (their bodies may echo a name the caller sent).
func TestAPIRefusalsCarryNoStoreAndNosniff(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	for _, rq := range []struct {
		method, path string
		auth         bool
		status       int
	}{
		{http.MethodGet, "/api/queues/acme/echo/dlq", false, http.StatusUnauthorized},
		{http.MethodGet, "/api/queues/acme/echo/dlq?limit=0", true, http.StatusBadRequest},
		{http.MethodGet, "/api/queues/A/echo/dlq", true, http.StatusBadRequest},
		{http.MethodPost, "/api/queues/acme/echo/dlq/9/discard", true, http.StatusNotFound},
		{http.MethodGet, "/api/journal?limit=0", true, http.StatusBadRequest},
	} {
		var w = fx.serve(newRequest(rq.method, rq.path, ""))
		if rq.auth {
			w = fx.admin(rq.method, rq.path)
		}
		if w.Code != rq.status {
			t.Errorf("%s %s: %d, want %d", rq.method, rq.path, w.Code, rq.status)
		}
		if got := w.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s (%d): Cache-Control = %q, want no-store", rq.method, rq.path, w.Code, got)
		}
		if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options = %q, want nosniff", rq.method, rq.path, w.Code, got)
		}
	}
}

// TestAPIJournalNewestFirstByTime: the journal is "newest first" by its
// entries' times (when each execution began), though an entry is written
// when its execution ends: a long execution that began first is listed
// after a short one that began later.
func TestAPIJournalNewestFirstByTime(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	// written in the order the executions ended: the short one (started at
	// t0+5s, 10 ms) ended before the long one (started at t0+1s, 30 s)
	writeJournal(t, fx.reg,
		registry.Entry{At: t0.Add(5 * time.Second), Door: "run", Tenant: "acme", Flow: "echo", Version: 1, CorrelationID: "short-later",
			Attempt: 1, Outcome: "succeeded", Status: 200, Duration: 10 * time.Millisecond},
		registry.Entry{At: t0.Add(1 * time.Second), Door: "enqueue", Tenant: "acme", Flow: "echo", Version: 1, CorrelationID: "long-earlier",
			MsgID: 1, Attempt: 1, Outcome: "succeeded", Status: 200, Duration: 30 * time.Second},
	)
	got := fx.journal(t, "")
	if len(got) != 2 {
		t.Fatalf("%d entries", len(got))
	}
	if got[0].At < got[1].At {
		t.Errorf("not newest first: %s (%s) listed before %s (%s)", got[0].At, got[0].CorrelationID, got[1].At, got[1].CorrelationID)
	}
	// and limit=1 should be the newest execution
	if one := fx.journal(t, "limit=1"); len(one) != 1 || one[0].CorrelationID != "short-later" {
		t.Errorf("limit=1: %+v, want the execution that started last (short-later)", one)
	}
}

// TestUIConcurrentPagesAndActions: pages and listings read while replays
// and discards run (under -race); each dead letter is handled once.
func TestUIConcurrentPagesAndActions(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	payloads := make([]string, 40)
	for i := range payloads {
		payloads[i] = `{"n":` + strconv.Itoa(i+1) + `}`
	}
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	c := fx.login(t)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := 1; i <= 40; i++ {
		action := "replay"
		if i%2 == 0 {
			action = "discard"
		}
		for range 2 {
			wg.Go(func() {
				w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/"+strconv.Itoa(i)+"/"+action)
				switch w.Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusNotFound:
				default:
					t.Errorf("%s %d: %d %s", action, i, w.Code, w.Body)
				}
			})
		}
		wg.Go(func() {
			for _, p := range []string{"/ui/queues", "/ui/queues/acme/echo", "/api/queues", "/api/queues/acme/echo/dlq?limit=5", "/ui/"} {
				if w := fx.get(p, c); w.Code != http.StatusOK {
					t.Errorf("GET %s: %d %.300s", p, w.Code, w.Body)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 40 {
		t.Errorf("%d actions succeeded, want 40 (one per id)", ok.Load())
	}
	if got := fx.pendingIDs(t, "acme", "echo"); len(got) != 0 {
		t.Errorf("pending: %v", got)
	}
}

// TestUIQueueNextPageKeepsLimit: the Queue page's page links keep its
// ?limit=, so the second page of a 10-a-page listing holds 10, not 50.
func TestUIQueueNextPageKeepsLimit(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	payloads := make([]string, 80)
	for i := range payloads {
		payloads[i] = `{"n":` + strconv.Itoa(i+1) + `}`
	}
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/echo?limit=10"), http.StatusOK)
	if n := len(idRow.FindAllString(body, -1)); n != 10 {
		t.Fatalf("limit=10: %d rows", n)
	}
	if !strings.Contains(body, `?after=10&amp;limit=10" rel="next"`) {
		m := regexp.MustCompile(`<a href="[^"]*" rel="next">`).FindString(body)
		t.Errorf("the next link of a 10-a-page listing is %s: its page holds 50, not 10", m)
	}
}
