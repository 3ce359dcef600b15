package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Examples of "Queues, retries and the DLQ" checked to the letter over the
// built binary, beside those of docqueue_test.go, dlq_test.go and
// queue_test.go: the nexus dlq list example with its ids and attempts, the
// replay and discard of id 7, the defaults and the cap of the retry keys, a
// retry re-running the steps that succeeded, the housekeeping of replayed
// and deleted dead letters, a replay at the back of the queue, the XML
// body read as $.id, the order of the correlation headers and the flags
// replay and discard require.

// docAuditForwardOrder is the forward-order flow of the page with none of
// the four retry keys: three attempts, 1000 and 2000 ms apart, as the
// entry of the nexus dlq list example (attempts 3, failed 3 s after it
// was enqueued).
func docAuditForwardOrder(t *testing.T, backendURL string) string {
	t.Helper()
	return queueExample(t, "forward-order", backendURL,
		"queue_max_attempts: 5\nqueue_initial_delay_ms: 500\nqueue_backoff_factor: 3.0\nqueue_max_delay_ms: 10000\n", "")
}

// TestDocAuditDLQListAsPrinted covers "Listing", "Replaying" and
// "Discarding": acme/forward-order with the default retries, whose seventh
// message the backend refuses (503), and acme/sync-invoices, whose second
// invoice fails its check, give the page's listing: two entries, id=7 and
// id=2, three attempts each, the page's last_error texts, the same output
// filtered by --tenant acme, and forward-order's entry alone with --flow.
// The replay and the discard of id 7 print the page's lines (each on its
// own copy of the stopped server's state directory) and leave the listing
// of sync-invoices' entry.
func TestDocAuditDLQListAsPrinted(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, `"A-7"`) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": docAuditForwardOrder(t, be.URL),
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL),
	}, hostOptions{}, "forward-order", "sync-invoices")

	for i := 1; i <= 7; i++ {
		if id := mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"A-%d","total":42}`, i)); id != uint64(i) {
			t.Fatalf("order A-%d got message id %d", i, id)
		}
	}
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-1","total":5}`)
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-2","total":0}`)
	waitEvents(t, h, "dlq_moved", 1, both(field("flow", "forward-order"), field("msg_id", 7)), 15*time.Second)
	waitEvents(t, h, "dlq_moved", 1, both(field("flow", "sync-invoices"), field("msg_id", 2)), 15*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	fo := dlqEntryRE(7, "forward-order", 3, "step 'forward': effect handler failed: HTTP 503 Service Unavailable")
	si := dlqEntryRE(2, "sync-invoices", 3, "step 'check': validation failed (Semantic): total must be positive")
	listing := regexp.MustCompile(`^DLQ: 2 pending message\(s\)\n` + fo + si + `$`)
	for _, args := range [][]string{{"list"}, {"list", "--tenant", "acme"}} {
		r := dlqCLI(t, h.db, args...)
		m := listing.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || r.stderr != "" {
			t.Fatalf("nexus dlq %v: exit %d\n%s%s\nwant the page's listing: %s", args, r.code, r.stdout, r.stderr, listing)
		}
		// the defaults wait 1000 and 2000 ms: failed_at is 3 s or more
		// after enqueued_at (whole seconds), as on the page
		enq, _ := time.Parse(time.RFC3339, m[1])
		failed, _ := time.Parse(time.RFC3339, m[2])
		if d := failed.Sub(enq); d < 3*time.Second || d > 15*time.Second {
			t.Errorf("forward-order's entry failed %v after it was enqueued, want the 3 s of the default retries", d)
		}
	}
	r := dlqCLI(t, h.db, "list", "--tenant", "acme", "--flow", "forward-order")
	if !regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n`+fo+`$`).MatchString(r.stdout) || r.code != 0 {
		t.Errorf("nexus dlq list --tenant acme --flow forward-order: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// the replay and the discard of the page, each on a copy of the state
	onlyInvoices := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + si + `$`)
	for _, c := range []struct{ sub, want string }{
		{"replay", "replayed  id=7 tenant=acme flow=forward-order\n"},
		{"discard", "discarded id=7 tenant=acme flow=forward-order\n" +
			"  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings\n"},
	} {
		db := copyState(t, h.db)
		r := dlqCLI(t, db, c.sub, "--tenant", "acme", "--flow", "forward-order", "--id", "7")
		if r.code != 0 || r.stdout != c.want || r.stderr != "" {
			t.Errorf("nexus dlq %s --tenant acme --flow forward-order --id 7: exit %d %q %q, want %q", c.sub, r.code, r.stdout, r.stderr, c.want)
		}
		if r := dlqCLI(t, db, "list"); r.code != 0 || !onlyInvoices.MatchString(r.stdout) {
			t.Errorf("nexus dlq list after the %s: exit %d\n%s%s", c.sub, r.code, r.stdout, r.stderr)
		}
	}
}

// copyState copies the folder of a stopped server's --db (registry.db and
// queues/) to a new folder and returns the --db there.
func copyState(t *testing.T, db string) string {
	t.Helper()
	src := filepath.Dir(db)
	dst := filepath.Join(t.TempDir(), "state")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case info.IsDir():
			return os.MkdirAll(target, 0o700)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst, filepath.Base(db))
}

// docAuditRetryFlow is a flow that posts to BACKEND/PATH with the retry
// keys KEYS (front-matter lines).
const docAuditRetryFlow = `---
flowmarkdown_version: "0.1"
flow: NAME
tenant: acme
effects: [http_egress]
KEYS---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/PATH
method: POST
`

// TestDocAuditRetryKeyDefaults covers the table of "Retry configuration"
// and its formula, delay = min(initial × factor^(n−1), max), for the keys a
// flow leaves out, against a backend refusing every call: max 60000 by
// default (an initial delay of 100000 ms waits 60000), factor 2.0 by default
// (100 then 200 ms, three attempts by default), 1.0 a fixed delay, and a
// cap on every delay past it (100, 200, 300, 300 with a max of 300).
func TestDocAuditRetryKeyDefaults(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	cases := []struct {
		name, keys string
		delays     []string // of queue_retry_scheduled, in order
		attempts   int      // of dlq_moved; 0: not dead-lettered within the test
	}{
		{"default-max", "queue_initial_delay_ms: 100000\n", []string{"60000"}, 0},
		{"default-factor", "queue_initial_delay_ms: 100\n", []string{"100", "200"}, 3},
		{"fixed-delay", "queue_max_attempts: 4\nqueue_initial_delay_ms: 200\nqueue_backoff_factor: 1.0\n", []string{"200", "200", "200"}, 4},
		{"capped", "queue_max_attempts: 5\nqueue_initial_delay_ms: 100\nqueue_backoff_factor: 2.0\nqueue_max_delay_ms: 300\n", []string{"100", "200", "300", "300"}, 5},
	}
	files := map[string]string{}
	var names []string
	for _, c := range cases {
		files["flows/acme/"+c.name+".md"] = strings.NewReplacer("NAME", c.name, "KEYS", c.keys, "BACKEND", be.URL, "PATH", c.name).Replace(docAuditRetryFlow)
		names = append(names, c.name)
	}
	h, _ := queueHost(t, files, hostOptions{}, names...)
	for _, c := range cases {
		mustEnqueue(t, h, "acme", c.name, acmeKey, `{"orderId":"A-1"}`)
	}
	for _, c := range cases {
		if c.attempts > 0 {
			moved := waitEvents(t, h, "dlq_moved", 1, field("flow", c.name), 15*time.Second)[0]
			if fmt.Sprint(moved["attempts"]) != fmt.Sprint(c.attempts) {
				t.Errorf("%s: dlq_moved %v, want %d attempts", c.name, moved, c.attempts)
			}
		}
		evs := waitEvents(t, h, "queue_retry_scheduled", len(c.delays), field("flow", c.name), 15*time.Second)
		var got []string
		for _, e := range evs {
			got = append(got, fmt.Sprint(e["delay_ms"]))
		}
		if strings.Join(got, ",") != strings.Join(c.delays, ",") {
			t.Errorf("%s (%q): delays %v, want %v", c.name, c.keys, got, c.delays)
		}
		if n := len(be.on("/" + c.name)); c.attempts > 0 && n != c.attempts {
			t.Errorf("%s: %d attempts at the backend, want %d", c.name, n, c.attempts)
		}
	}
	if n := len(be.on("/default-max")); n != 1 {
		t.Errorf("default-max: %d attempts, want 1 (the next is a minute away)", n)
	}
}

// TestDocAuditRetryRerunsEarlierSteps covers "A retry is the same thing by
// design: the flow restarts from step one with the original payload" and
// "Derive keys from the payload, never from the clock or a random value":
// the second step fails, so every attempt calls the first step's endpoint
// again with the original payload; a key from $.orderId is the same on
// every attempt, keys from uuid() and now() are new on each.
func TestDocAuditRetryRerunsEarlierSteps(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/second") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	// attempts 1100 ms apart: now() has whole seconds
	flowSrc := `---
flowmarkdown_version: "0.1"
flow: rerun
tenant: acme
effects: [http_egress]
queue_max_attempts: 3
queue_initial_delay_ms: 1100
queue_backoff_factor: 1.0
---

## Step: first
effects: [http_egress]
endpoint: ` + be.URL + `/first
method: POST
headers: {"X-Payload-Key": "{{ $.orderId }}", "X-Random-Key": "{{ uuid() }}", "X-Clock-Key": "{{ now() }}"}

## Step: build
` + "```ntd" + `
{ "orderId": "{{ $.orderId }}" }
` + "```" + `

## Step: second
effects: [http_egress]
endpoint: ` + be.URL + `/second
method: POST
`
	h, _ := queueHost(t, map[string]string{"flows/acme/rerun.md": flowSrc}, hostOptions{}, "rerun")
	const payload = `{"orderId":"A-1","total":42}`
	mustEnqueue(t, h, "acme", "rerun", acmeKey, payload)
	moved := waitEvents(t, h, "dlq_moved", 1, nil, 15*time.Second)[0]
	if want := "step 'second': effect handler failed: HTTP 503 Service Unavailable"; moved["last_error"] != want || fmt.Sprint(moved["attempts"]) != "3" {
		t.Errorf("dlq_moved: %v, want 3 attempts and %q", moved, want)
	}
	first, second := be.on("/first"), be.on("/second")
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("%d calls to /first and %d to /second, want 3 and 3: each attempt runs from step one", len(first), len(second))
	}
	random, clock := map[string]bool{}, map[string]bool{}
	for i, x := range first {
		if x.body != payload {
			t.Errorf("attempt %d: /first got %s, want the original payload %s", i+1, x.body, payload)
		}
		if k := x.header.Get("X-Payload-Key"); k != "A-1" {
			t.Errorf("attempt %d: X-Payload-Key %q, want A-1 on every attempt", i+1, k)
		}
		random[x.header.Get("X-Random-Key")] = true
		clock[x.header.Get("X-Clock-Key")] = true
	}
	if len(random) != 3 || len(clock) != 3 {
		t.Errorf("uuid() gave %d values and now() %d in 3 attempts, want a new value on every attempt: %v %v", len(random), len(clock), random, clock)
	}
}

// TestDocAuditDrainDropsReplayedEntries covers "Housekeeping": once the
// worker finds nothing left to deliver, segment.log is emptied in place and
// dlq.log is rewritten without the entry you replayed.
func TestDocAuditDrainDropsReplayedEntries(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := oneAttemptHost(t, be)
	dir := filepath.Join(queuesRoot(h.db), "acme", "forward-order")
	const replayed, kept = `{"orderId":"REPLAYED-8812"}`, `{"orderId":"KEPT-3306"}`
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, replayed)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, kept)
	waitEvents(t, h, "dlq_moved", 2, nil, 10*time.Second)

	be.setStatus(http.StatusOK)
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1"); r.code != 0 || r.stdout != "replayed  id=1 tenant=acme flow=forward-order\n" {
		t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	waitEvents(t, h, "queue_processed", 1, both(field("msg_id", 3), field("outcome", "succeeded")), 10*time.Second)
	eventually(t, 5*time.Second, "dlq.log rewritten without the replayed entry, segment.log emptied", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "dlq.log"))
		info, serr := os.Stat(filepath.Join(dir, "segment.log"))
		return err == nil && !bytes.Contains(b, []byte("REPLAYED-8812")) && serr == nil && info.Size() == 0
	})
	b, _ := os.ReadFile(filepath.Join(dir, "dlq.log"))
	if !bytes.Contains(b, []byte(kept)) {
		t.Errorf("dlq.log lost the entry nobody handled (%d bytes)", len(b))
	}
	want := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(2, "forward-order", 1, forwardError) + `$`)
	if r := dlqCLI(t, h.db, "list"); r.code != 0 || !want.MatchString(r.stdout) {
		t.Errorf("dlq list after the drain: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestDocAuditDeleteDeadLettersAtOnce covers "To delete immediately, stop
// the platform and remove {queue_dir}/{tenant}/{flow}/dlq.log together with
// dlq.log.acked. That also takes the entries nobody marked.": afterwards
// nexus dlq list prints DLQ is empty, and the restarted platform takes the
// next submission under the next id.
func TestDocAuditDeleteDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, repo := oneAttemptHost(t, be)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-2"}`)
	waitEvents(t, h, "dlq_moved", 2, nil, 10*time.Second)
	if r := dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "forward-order", "--id", "1"); r.code != 0 {
		t.Fatalf("dlq discard: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	dir := filepath.Join(queuesRoot(h.db), "acme", "forward-order")
	for _, f := range []string{"dlq.log", "dlq.log.acked"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if r := dlqCLI(t, h.db, "list"); r.code != 0 || r.stdout != "DLQ is empty\n" || r.stderr != "" {
		t.Errorf("dlq list after removing dlq.log and dlq.log.acked: exit %d %q %q, want DLQ is empty", r.code, r.stdout, r.stderr)
	}
	be.setStatus(http.StatusOK)
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	if id := mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"A-3"}`); id != 3 {
		t.Errorf("X-Nexus-Message-Id %d, want 3", id)
	}
	waitEvents(t, h2, "queue_processed", 1, both(field("msg_id", 3), field("outcome", "succeeded")), 10*time.Second)
	if r := dlqCLI(t, h.db, "list"); r.code != 0 || r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list after the restart: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestDocAuditReplayAtTheBack covers "The payload is appended to the main
// queue as a new message, at the back": a dead letter replayed while
// messages wait in the queue is delivered after them, as the next id.
func TestDocAuditReplayAtTheBack(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	be.setAnswer(func(x hit) int {
		switch {
		case strings.Contains(x.body, "HOLD"):
			<-release
		case strings.Contains(x.body, "DEAD") && len(be.on("/ingest")) == 1:
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, _ := oneAttemptHost(t, be)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"DEAD"}`)
	waitEvents(t, h, "dlq_moved", 1, nil, 10*time.Second)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"HOLD"}`)
	be.waitOn(t, "/ingest", 2, 10*time.Second) // HOLD at the backend, held
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"M-3"}`)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"M-4"}`)
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1"); r.code != 0 || r.stdout != "replayed  id=1 tenant=acme flow=forward-order\n" {
		t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	once.Do(func() { close(release) })
	waitEvents(t, h, "queue_processed", 4, nil, 10*time.Second)
	var got []string
	for _, x := range be.on("/ingest") {
		got = append(got, x.body)
	}
	want := []string{`{"orderId":"DEAD"}`, `{"orderId":"HOLD"}`, `{"orderId":"M-3"}`, `{"orderId":"M-4"}`, `{"orderId":"DEAD"}`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("deliveries %v, want %v: the replay at the back of the queue", got, want)
	}
	if ev := waitEvents(t, h, "queue_processed", 1, field("msg_id", 5), 5*time.Second)[0]; ev["outcome"] != "succeeded" || fmt.Sprint(ev["attempt"]) != "1" {
		t.Errorf("queue_processed of the replay: %v, want message 5 on attempt 1", ev)
	}
}

// TestDocAuditEnqueueXMLAndCorrelation covers "The asynchronous path":
// <order><id>A-1</id></order> is read in the flow as $.id, and the
// correlation ID is taken from X-Correlation-ID before X-Request-ID.
func TestDocAuditEnqueueXMLAndCorrelation(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	flowSrc := strings.NewReplacer("NAME", "by-id", "KEYS", "", "BACKEND", be.URL, "PATH", "orders/{{ $.id }}").Replace(docAuditRetryFlow)
	h, _ := queueHost(t, map[string]string{"flows/acme/by-id.md": flowSrc}, hostOptions{}, "by-id")
	r := h.do(http.MethodPost, "/flows/acme/by-id/enqueue", acmeKey, "application/xml", `<order><id>A-1</id></order>`,
		"X-Correlation-ID", "trace-xml-first", "X-Request-ID", "trace-xml-second")
	if want := `{"queued":true,"offset":0,"tenant":"acme","flow":"by-id"}`; r.status != http.StatusAccepted || r.body != want {
		t.Fatalf("enqueue: %d %s, want 202 %s", r.status, r.body, want)
	}
	if cid := r.header.Get("X-Correlation-Id"); cid != "trace-xml-first" {
		t.Errorf("X-Correlation-Id %q, want X-Correlation-ID's trace-xml-first before X-Request-ID's", cid)
	}
	got := be.waitOn(t, "/orders/", 1, 10*time.Second)[0]
	if got.path != "/orders/A-1" || got.body != `{"id":"A-1"}` || got.header.Get("X-Correlation-Id") != "trace-xml-first" {
		t.Errorf("the flow called %s with %s (X-Correlation-Id %q), want /orders/A-1 with {\"id\":\"A-1\"}", got.path, got.body, got.header.Get("X-Correlation-Id"))
	}
}

// TestDocAuditDLQFlagsRequired covers the flags table: --tenant, --flow and
// --id are required for replay and discard (a usage error, exit 2, with
// nothing written), and --id is not a flag of list.
func TestDocAuditDLQFlagsRequired(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	for _, sub := range []string{"replay", "discard"} {
		for _, args := range [][]string{
			{sub, "--flow", "forward-order", "--id", "7"},
			{sub, "--tenant", "acme", "--id", "7"},
			{sub, "--tenant", "acme", "--flow", "forward-order"},
		} {
			r := dlqCLI(t, db, args...)
			if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "nexus dlq "+sub+": ") {
				t.Errorf("nexus dlq %v: exit %d %q %q, want a usage error (exit 2)", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	if r := dlqCLI(t, db, "list", "--id", "7"); r.code != 2 || r.stdout != "" {
		t.Errorf("nexus dlq list --id 7: exit %d %q %q, want a usage error", r.code, r.stdout, r.stderr)
	}
	if exists(filepath.Dir(db)) {
		t.Errorf("the refused commands created %s", filepath.Dir(db))
	}
}

// TestDocAuditGateBeforeTheBody covers the first step of "The asynchronous
// path": a caller refused by the gate gets 404 or 429 without the body
// being read. Each submission announces a body over the 1 MiB ceiling and
// sends none of it: the answer is the gate's refusal, not 413, and it
// comes without waiting for the body.
func TestDocAuditGateBeforeTheBody(t *testing.T) {
	t.Parallel()
	const limitedKey = "test-key-acme-limited"
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"access.yaml": accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey},
			testKey{id: "acme-limited", tenant: "acme", key: limitedKey, rate: 1, burst: 1}),
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	announce := func(path, key string) rawAnswer {
		return rawExchange(t, h.url, "POST "+path+" HTTP/1.1\r\nHost: nexus\r\nAuthorization: Bearer "+key+
			"\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n")
	}
	a := announce("/flows/acme/nope/enqueue", acmeKey)
	if want := `{"ok":false,"error":"no flow acme/nope is deployed"}`; a.resp.StatusCode != http.StatusNotFound || a.body != want {
		t.Errorf("unknown flow announcing 2 MB: %s %s, want 404 %s", a.resp.Status, a.body, want)
	}
	if r := h.enqueue("acme", "forward-order", limitedKey, `{"orderId":"A-1"}`); r.status != http.StatusAccepted {
		t.Fatalf("the limited key's first submission: %d %s", r.status, r.body)
	}
	a = announce("/flows/acme/forward-order/enqueue", limitedKey)
	if want := `{"ok":false,"error":"rate limit exceeded"}`; a.resp.StatusCode != http.StatusTooManyRequests || a.body != want {
		t.Errorf("over the rate announcing 2 MB: %s %s, want 429 %s", a.resp.Status, a.body, want)
	}
	// and with the rate available, the same announcement is 413: the
	// ceiling applies once the gate let the caller through
	a = announce("/flows/acme/forward-order/enqueue", acmeKey)
	if a.resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a valid key announcing 2 MB: %s %s, want 413", a.resp.Status, a.body)
	}
}
