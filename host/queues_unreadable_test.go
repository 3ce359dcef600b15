package host_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueuesListedWhenOneLogCannotBeCounted: a queue whose segment.log
// cannot be read (an I/O error; here a folder in its place) is listed
// with the error in place of its counts, and every other queue as it is.
// The whole of GET /api/queues and the Queues page answered 500, hiding
// the queues that could be read, their dead letters among them; the
// queue's own page answered 500 too, hiding its dead letters.
func TestQueuesListedWhenOneLogCannotBeCounted(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	if err := os.MkdirAll(filepath.Join(fx.root, "acme", "hello", "segment.log"), 0o700); err != nil {
		t.Fatal(err)
	}

	got := listedQueues(t, fx)
	if q := got["acme/echo"]; q == nil || q["dead_letters"] != 2.0 || q["error"] != nil {
		t.Errorf("acme/echo: %v, want listed with its 2 dead letters and no error", q)
	}
	if q := got["acme/hello"]; q == nil || !strings.Contains(q["error"].(string), "segment.log") {
		t.Errorf("acme/hello: %v, want listed with an error naming its segment.log", got["acme/hello"])
	}

	body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues"), http.StatusOK)
	for _, want := range []string{`data-queue="acme/echo"`, `data-queue="globex/shipment"`, `data-queue="acme/hello"`, "is a directory"} {
		if !strings.Contains(body, want) {
			t.Errorf("the Queues page does not show %q", want)
		}
	}
	body = wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/hello"), http.StatusOK)
	if !strings.Contains(body, "is a directory") {
		t.Errorf("the Queue page of acme/hello does not say why its log is not counted")
	}
}

// TestQueuesSayWhatCannotBeRead: a queue whose dead-letter files or retry
// schedule cannot be read is listed with the error, not with 0 dead
// letters or 0 retrying: an operator reading "dead_letters": 0 would take
// the queue for one with nothing to replay.
func TestQueuesSayWhatCannotBeRead(t *testing.T) {
	for _, tc := range []struct {
		file, page string // the file made unreadable; what the Queues page says
	}{
		{"dlq.log", "its dead letters could not be counted"},
		{"segment.log.retry", "its retries could not be read"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			fx := newAdminFixture(t, adminOptions{key: adminKey})
			seedTwoQueues(t, fx)
			if err := os.MkdirAll(filepath.Join(fx.root, "acme", "hello", tc.file), 0o700); err != nil {
				t.Fatal(err)
			}
			q := listedQueues(t, fx)["acme/hello"]
			if e, _ := q["error"].(string); !strings.Contains(e, tc.file) {
				t.Errorf("acme/hello: %v, want listed with an error naming its %s", q, tc.file)
			}
			body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues"), http.StatusOK)
			if !strings.Contains(body, tc.page) {
				t.Errorf("the Queues page does not say of acme/hello %q", tc.page)
			}
		})
	}
}

// listedQueues is GET /api/queues's queues by tenant/flow.
func listedQueues(t *testing.T, fx *adminFixture) map[string]map[string]any {
	t.Helper()
	return listedQueuesQuery(t, fx, "")
}

// listedQueuesQuery is listedQueues for GET /api/queues?query.
func listedQueuesQuery(t *testing.T, fx *adminFixture, query string) map[string]map[string]any {
	t.Helper()
	w := fx.admin(http.MethodGet, "/api/queues?"+query)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /api/queues?%s: %d %s, want 200", query, w.Code, w.Body)
	}
	var doc struct {
		Queues []map[string]any `json:"queues"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, q := range doc.Queues {
		got[q["tenant"].(string)+"/"+q["flow"].(string)] = q
	}
	return got
}

// TestMetricsLeaveOutCountsNotRead: /metrics leaves out the series of a
// queue's count it could not read (nexus_queue_depth for a log that cannot
// be read, nexus_queue_dead_letters for dead-letter files that cannot be,
// nexus_queue_retries_pending for a retry schedule that cannot be),
// rather than exporting 0: an alert on dead letters above 0 kept quiet
// over a dlq.log nobody could read, and absent() could not tell.
func TestMetricsLeaveOutCountsNotRead(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	for _, p := range []string{"acme/hello/segment.log", "acme/small/dlq.log", "acme/order-intake/segment.log.retry"} {
		if err := os.MkdirAll(filepath.Join(fx.root, filepath.FromSlash(p)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	text := fx.serve(newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, tc := range []struct {
		series string
		want   bool
	}{
		{`nexus_queue_depth{flow="hello",tenant="acme"}`, false},
		{`nexus_queue_dead_letters{flow="hello",tenant="acme"}`, true},
		{`nexus_queue_depth{flow="small",tenant="acme"}`, true},
		{`nexus_queue_dead_letters{flow="small",tenant="acme"}`, false},
		{`nexus_queue_dead_letters{flow="echo",tenant="acme"} 2`, true},
		{`nexus_queue_retries_pending{flow="order-intake",tenant="acme"}`, false},
		{`nexus_queue_retries_pending{flow="hello",tenant="acme"}`, true},
	} {
		if got := strings.Contains(text, "\n"+tc.series); got != tc.want {
			t.Errorf("/metrics has %s: %v, want %v", tc.series, got, tc.want)
		}
	}
}

// TestQueueDetailWhenDeadLettersCannotBeRead: a queue whose dead-letter
// files cannot be read (an I/O error; here a folder in place of the file,
// which root cannot read past either) has its Queue page and its
// GET /api/queues/{tenant}/{flow}/dlq answer what they can, with the
// error in place of the dead letters, as the listings do. Both answered
// 500, the page hiding the queue's counts, which could be read.
func TestQueueDetailWhenDeadLettersCannotBeRead(t *testing.T) {
	for _, file := range []string{"dlq.log", "dlq.log.acked"} {
		t.Run(file, func(t *testing.T) {
			fx := newAdminFixture(t, adminOptions{key: adminKey})
			seedTwoQueues(t, fx)
			p := filepath.Join(fx.root, "acme", "echo", file)
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}

			w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq")
			if w.Code != http.StatusOK {
				t.Fatalf("GET /api/queues/acme/echo/dlq: %d %s, want 200 with the error", w.Code, w.Body)
			}
			var doc map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if e, _ := doc["error"].(string); !strings.Contains(e, "its dead letters could not be read") || !strings.Contains(e, file) {
				t.Errorf("error = %q, want one naming %s", e, file)
			}
			if dl, ok := doc["dead_letters"].([]any); !ok || len(dl) != 0 || doc["tenant"] != "acme" || doc["flow"] != "echo" {
				t.Errorf("answer %s, want the queue named and an empty dead_letters", w.Body)
			}

			body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/echo"), http.StatusOK)
			for _, want := range []string{`id="dead-letters-error"`, "is a directory", `id="counts"`, "4 total, 2 processed, 2 pending"} {
				if !strings.Contains(body, want) {
					t.Errorf("the Queue page does not show %q", want)
				}
			}
			for _, unwanted := range []string{`id="replay-all"`, "DLQ is empty"} {
				if strings.Contains(body, unwanted) {
					t.Errorf("the Queue page shows %q for dead letters it could not read", unwanted)
				}
			}
		})
	}
}

// TestPayloadWhenDeadLettersCannotBeRead: a dead letter's payload download
// (the API's and the UI's link) over a dlq.log that cannot be read (an I/O
// error; here a folder in its place) answers 503, one line naming the
// queue, the id and the system's error once, as the listing says it in its
// "error": the payload cannot be given, and the host is not at fault. It
// answered 500 "internal error", as for a defect of the host; then a line
// that said "could not be read" twice.
func TestPayloadWhenDeadLettersCannotBeRead(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	p := filepath.Join(fx.root, "acme", "echo", "dlq.log")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	const prefix = "queue acme/echo: the payload of dead letter 1 could not be read: read "

	w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq/1/payload")
	wantRefusalPrefix(t, w, http.StatusServiceUnavailable, prefix)
	if e := w.Body.String(); !strings.Contains(e, "dlq.log") || !strings.Contains(e, "is a directory") || strings.Contains(e, "\n") {
		t.Errorf("body %q, want one line naming dlq.log and the system's error", e)
	}
	if e := w.Body.String(); strings.Count(e, "could not be read") != 1 {
		t.Errorf("body %q says \"could not be read\" more than once", e)
	}
	if ct := w.Header().Get("Content-Disposition"); ct != "" {
		t.Errorf("Content-Disposition = %q on a refusal", ct)
	}

	body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/echo/dlq/1/payload"), http.StatusServiceUnavailable)
	for _, want := range []string{"queue acme/echo: the payload of dead letter 1 could not be read", "is a directory", `href="/ui/queues/acme/echo"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the payload link's page does not show %q", want)
		}
	}
	if n := strings.Count(body, "could not be read"); n != 1 {
		t.Errorf("the payload link's page says \"could not be read\" %d times, want once", n)
	}
}
