package host_test

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/queue"
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

// TestDeadLetterRedeliveredAfterACrashIsListedOnce: a message dead-lettered,
// then delivered again after a crash (its checkpoint had not moved past it)
// and dead-lettered again, is one row of the Queue page and one entry of
// the API's list, as its id is one message (server.md: "a dead letter keeps
// its message's id"). It was listed twice, with two Replay buttons.
func TestDeadLetterRedeliveredAfterACrashIsListedOnce(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("fails", "queue_max_attempts: 1\n",
		"## Step: check\n```validate\n$.never != null | \"never set\" | syntactic\n```\n")
	// the state a process killed mid-backlog leaves: message 1 failed and
	// was dead-lettered (dlq.log is synced), the checkpoint not yet moved
	// past it
	seedQueue(t, fx.root, "acme", "fails", fx.clock.Now, func(q *queue.Queue) {
		msgs := appendMessages(t, q, `{"n":1}`)
		deadLetter(t, q, msgs[0], t0, 1, "step check: never set")
	})
	if got := fx.pendingIDs(t, "acme", "fails"); len(got) != 1 || got[0] != 1 {
		t.Fatalf("seeded dead letters: %v, want [1]", got)
	}
	// the first submission after the restart starts the worker
	fx.enqueue(t, "fails", `{"n":2}`)
	fx.waitJournal(t, "acme", "fails", 2)
	deadline := time.Now().Add(5 * time.Second)
	var got []uint64
	for {
		got = fx.pendingIDs(t, "acme", "fails")
		if len(got) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("pending dead letters listed by the API: %v, want [1 2] (each id once)", got)
	}
	body := fx.admin(http.MethodGet, "/ui/queues/acme/fails").Body.String()
	if n := strings.Count(body, `<tr data-id="1">`); n != 1 {
		t.Errorf("the Queue page has %d rows for dead letter 1, want 1", n)
	}
}

// TestReplayOfAnIDNotPendingIsA404WhenTheFlowIsNotLive: replaying an id
// that is not a pending dead letter answers 404 with the CLI's words
// (docs/management.md) whether or not the flow is live; the 409 "not live"
// is for a pending one. It answered 409, and after the operator published
// the flow, 404 anyway.
func TestReplayOfAnIDNotPendingIsA404WhenTheFlowIsNotLive(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`)
	// id 1 is discarded (by the CLI, another server, a colleague)
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/1/discard"), `{"tenant":"acme","flow":"gone","id":1,"discarded":true}`)
	for _, id := range []string{"1", "9"} {
		wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/"+id+"/replay"), http.StatusNotFound,
			"no pending dead letter id="+id+" tenant=acme flow=gone")
		w := fx.admin(http.MethodPost, "/ui/queues/acme/gone/dlq/"+id+"/replay")
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "no pending dead letter id="+id+" tenant=acme flow=gone") {
			t.Errorf("UI replay of %s: %d, want 404 naming the dead letter; page: %.200s", id, w.Code,
				regexp.MustCompile(`(?s)<div class="error"[^>]*>.*?</div>`).FindString(w.Body.String()))
		}
	}
}

// TestAdminKeyIsTrimmed: an admin key configured with a trailing newline (a
// key read from a secret file) is the key without it, as a caller's key is
// read. It locked everyone out of /status, the API and the UI: no header or
// password field can carry the newline.
func TestAdminKeyIsTrimmed(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey + "\n"})
	for _, path := range []string{"/status", "/api/flows", "/ui/"} {
		if w := fx.admin(http.MethodGet, path); w.Code != http.StatusOK {
			t.Errorf("GET %s with the admin key (configured with a trailing newline): %d %.100s", path, w.Code, w.Body)
		}
	}
	if w := fx.serve(loginRequest(adminKey, "")); w.Code != http.StatusSeeOther {
		t.Errorf("logging in with the admin key (configured with a trailing newline): %d", w.Code)
	}
}
