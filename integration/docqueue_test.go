package integration

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Examples of "Queues, retries and the DLQ" that no other test covers, over
// the built binary: a signed submission against the size ceiling, the
// queue folder of the page's table, what a dead letter keeps, the order of
// first deliveries and retries, the idempotent receiver flow, and the two
// stages of nexus dlq discard.

// docQueueSignature returns the X-Nexus-Timestamp and X-Nexus-Signature
// header pairs signing body with secret now: v1=<hex HMAC-SHA256(secret,
// timestamp + "." + body)>, as host/signature.go and the server page say.
func docQueueSignature(secret, body string) []string {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + body))
	return []string{"X-Nexus-Timestamp", ts, "X-Nexus-Signature", "v1=" + hex.EncodeToString(mac.Sum(nil))}
}

// TestDocQueueSizeBeforeSignature covers "The asynchronous path" with
// --secret: the body is read under the size ceiling before the signature is
// checked, so a valid key announcing an oversized unsigned body is told 413
// (body exceeds 1048576 bytes), a small unsigned body 401 for its missing
// signature, and the page's curl body, correctly signed, gets the page's
// 202 Accepted at offset 0. The refused submissions write nothing.
func TestDocQueueSizeBeforeSignature(t *testing.T) {
	t.Parallel()
	const secret = "whsec_doc_queue_size_before_signature"
	be := newLoopback(t)
	// no waitGate: with --secret its unsigned probe is refused 401, not 400
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{args: []string{"--secret", secret}})
	queueDir := filepath.Join(queuesRoot(h.db), "acme")

	// a small unsigned body: past the gate, refused for its signature
	var r response
	eventually(t, 15*time.Second, "acme/forward-order deployed behind the signature check", func() bool {
		r = h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-1","total":42}`)
		return r.status == http.StatusUnauthorized && strings.Contains(r.body, "signature")
	})
	if strings.Contains(r.body, "missing or unknown API key") || r.header.Get("X-Correlation-Id") == "" {
		t.Errorf("small unsigned body: %d %s, want 401 for the missing signature, with X-Correlation-Id", r.status, r.body)
	}

	// an oversized unsigned body: the size check comes first
	big := `{"orderId":"A-1","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	r = h.enqueue("acme", "forward-order", acmeKey, big)
	if want := `{"ok":false,"error":"body exceeds 1048576 bytes"}`; r.status != http.StatusRequestEntityTooLarge || r.body != want {
		t.Errorf("oversized unsigned body with a valid key: %d %s, want 413 %s (the size is checked before the signature)", r.status, r.body, want)
	}
	// and the same size correctly signed is still over the ceiling
	r = h.enqueue("acme", "forward-order", acmeKey, big, docQueueSignature(secret, big)...)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized signed body: %d %s, want 413", r.status, r.body)
	}
	// the small unsigned body once more, after the 413s
	if r = h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-1","total":42}`); r.status != http.StatusUnauthorized {
		t.Errorf("small unsigned body: %d %s, want 401", r.status, r.body)
	}
	if exists(queueDir) {
		t.Errorf("refused submissions created %s", queueDir)
	}
	if n := len(be.received()); n != 0 {
		t.Errorf("%d calls to the backend from refused submissions", n)
	}

	// the page's curl, signed
	const body = `{"orderId":"A-1","total":42}`
	r = h.enqueue("acme", "forward-order", acmeKey, body, append(docQueueSignature(secret, body), "X-Correlation-ID", "trace-doc-signed")...)
	if want := `{"queued":true,"offset":0,"tenant":"acme","flow":"forward-order"}`; r.status != http.StatusAccepted || r.body != want {
		t.Fatalf("signed submission: %d %s, want 202 %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("202 with Content-Type %q, want application/json", ct)
	}
	got := be.waitBody(t, "/ingest", body, 15*time.Second)
	if got.header.Get("X-Correlation-Id") != "trace-doc-signed" {
		t.Errorf("the signed message ran with X-Correlation-Id %q", got.header.Get("X-Correlation-Id"))
	}
	waitEvents(t, h, "queue_processed", 1, both(field("msg_id", 1), field("outcome", "succeeded")), 15*time.Second)
}

// TestDocQueueFolderLayout covers the table of "Where it is stored": after
// an enqueue, a delivery that is retried, a dead letter and a discard,
// {state}/queues/acme/{flow}/ holds segment.log, segment.log.ckpt,
// segment.log.retry, segment.log.seq, dlq.log and dlq.log.acked as regular
// files (the lock files beside them are allowed).
func TestDocQueueFolderLayout(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "fail-always") {
			return http.StatusServiceUnavailable
		}
		return failFirst(x)
	})
	h, _ := queueHost(t, map[string]string{
		"flows/acme/layout.md": retryFlowFor("layout", be.URL, "layout", 100),
	}, hostOptions{}, "layout")
	dir := filepath.Join(queuesRoot(h.db), "acme", "layout")

	mustEnqueue(t, h, "acme", "layout", acmeKey, `{"id":"L-1","mode":"fail-once"}`)
	mustEnqueue(t, h, "acme", "layout", acmeKey, `{"id":"L-2","mode":"fail-always"}`)
	// L-1 is retried and then delivered; L-2 spends its three attempts
	waitEvents(t, h, "queue_retry_scheduled", 1, field("msg_id", 1), 15*time.Second)
	waitEvents(t, h, "queue_processed", 1, both(field("msg_id", 1), field("outcome", "succeeded")), 15*time.Second)
	waitEvents(t, h, "dlq_moved", 1, field("msg_id", 2), 15*time.Second)

	r := dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "layout", "--id", "2")
	want := "discarded id=2 tenant=acme flow=layout\n" +
		"  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("dlq discard: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	waitEvents(t, h, "dlq_discarded", 1, field("msg_id", 2), 15*time.Second)

	names := dirNames(t, dir)
	for _, name := range []string{"segment.log", "segment.log.ckpt", "segment.log.retry", "segment.log.seq", "dlq.log", "dlq.log.acked"} {
		info, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case err != nil:
			t.Errorf("%s: %v (the folder holds %v)", name, err, names)
		case !info.Mode().IsRegular():
			t.Errorf("%s is a %v, want a regular file", name, info.Mode().Type())
		}
	}
	var extra []string
	for _, n := range names {
		switch n {
		case "segment.log", "segment.log.ckpt", "segment.log.retry", "segment.log.seq", "dlq.log", "dlq.log.acked":
		default:
			extra = append(extra, n)
		}
	}
	t.Logf("%s holds %v; beside the page's table: %v", dir, names, extra)
}

// TestDocQueueDeadLetterDropsCorrelationID covers "What reaches the
// dead-letter queue": a dead-lettered entry keeps the payload as submitted
// but not the correlation ID. The bytes of dlq.log hold the payload and not
// the X-Correlation-ID sent with the message; the dlq_moved event of the
// structured log carries it; nexus dlq list does not show it.
func TestDocQueueDeadLetterDropsCorrelationID(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/sync-invoices.md": fastInvoices(t, be.URL),
	}, hostOptions{}, "sync-invoices")
	const cid = "trace-doc-dlq-7c41e9"
	const payload = `{"invoiceId":"INV-DOC-5508","total":0}`
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, payload, "X-Correlation-ID", cid)

	moved := waitEvents(t, h, "dlq_moved", 1, nil, 20*time.Second)[0]
	if moved["correlation_id"] != cid || moved["tenant"] != "acme" || moved["flow"] != "sync-invoices" || fmt.Sprint(moved["msg_id"]) != "1" {
		t.Errorf("dlq_moved: %v, want correlation_id %s for acme/sync-invoices message 1", moved, cid)
	}
	dlqLog := filepath.Join(queuesRoot(h.db), "acme", "sync-invoices", "dlq.log")
	b, err := os.ReadFile(dlqLog)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(payload)) {
		t.Errorf("dlq.log (%d bytes) does not hold the payload as submitted %s", len(b), payload)
	}
	if bytes.Contains(b, []byte(cid)) {
		t.Errorf("dlq.log holds the correlation ID %s: a dead letter does not keep it", cid)
	}
	r := dlqCLI(t, h.db, "list")
	if want := `^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(1, "sync-invoices", 3, invoiceError) + `$`; r.code != 0 || !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Errorf("dlq list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, cid) {
		t.Errorf("dlq list shows the correlation ID:\n%s", r.stdout)
	}
}

// TestDocQueueRescheduledLosesItsPlace covers "Order is FIFO on first
// delivery only": first deliveries follow the order of submission, and a
// message whose delivery failed and waits for its retry loses its place:
// the messages submitted after it, before and after it failed, are
// delivered before its retry. The backend fails message 1's first attempt
// only, and holds that attempt until messages 2 to 5 are in the log.
func TestDocQueueRescheduledLosesItsPlace(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "fail-once") && x.header.Get("X-Attempt") == "1" {
			<-release
		}
		return failFirst(x)
	})
	// the retry is 3 s away: far more than the deliveries before it take
	h, _ := queueHost(t, map[string]string{
		"flows/acme/ordered.md": retryFlowFor("ordered", be.URL, "ordered", 3000),
	}, hostOptions{}, "ordered")

	msg := func(i int) string {
		if i == 1 {
			return `{"seq":1,"mode":"fail-once"}`
		}
		return fmt.Sprintf(`{"seq":%d}`, i)
	}
	mustEnqueue(t, h, "acme", "ordered", acmeKey, msg(1))
	be.waitOn(t, "/ordered", 1, 15*time.Second) // message 1 at the backend, held
	for i := 2; i <= 5; i++ {
		if id := mustEnqueue(t, h, "acme", "ordered", acmeKey, msg(i)); id != uint64(i) {
			t.Errorf("submission %d got message id %d", i, id)
		}
	}
	once.Do(func() { close(release) }) // message 1's first attempt fails now
	waitEvents(t, h, "queue_retry_scheduled", 1, field("msg_id", 1), 15*time.Second)
	// submitted while message 1 waits for its retry
	for i := 6; i <= 7; i++ {
		mustEnqueue(t, h, "acme", "ordered", acmeKey, msg(i))
	}
	waitEvents(t, h, "queue_processed", 7, nil, 30*time.Second)

	got := be.on("/ordered")
	var order []string
	for _, x := range got {
		order = append(order, x.body+" attempt "+x.header.Get("X-Attempt"))
	}
	var want []string
	for i := 1; i <= 7; i++ {
		want = append(want, msg(i)+" attempt 1")
	}
	want = append(want, msg(1)+" attempt 2")
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("deliveries in this order:\n%s\nwant the first deliveries in submission order and message 1's retry after the later messages:\n%s",
			strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	if evs := waitEvents(t, h, "queue_processed", 1, field("msg_id", 1), 5*time.Second); fmt.Sprint(evs[0]["attempt"]) != "2" || evs[0]["outcome"] != "succeeded" {
		t.Errorf("queue_processed of message 1: %v, want attempt 2 succeeded", evs[0])
	}
}

// idempotentFlow is the flow of "What you must do to be safe under
// redelivery", its two steps copied from the page with the endpoint host
// pointed at BACKEND. The front matter names it; queue_initial_delay_ms
// only shortens the default retry delays (three attempts, as by default).
const idempotentFlow = "---\n" +
	"flowmarkdown_version: \"0.1\"\n" +
	"flow: forward-order-idempotent\n" +
	"tenant: acme\n" +
	"effects: [http_egress]\n" +
	"queue_initial_delay_ms: 100\n" +
	"---\n" +
	"\n" +
	"## Step: forward\n" +
	"effects: [http_egress]\n" +
	"endpoint: BACKEND/ingest\n" +
	"method: POST\n" +
	"headers: {\"Idempotency-Key\": \"{{ ctx.correlation_id }}\"}\n" +
	"\n" +
	"## Step: accepted-means-accepted\n" +
	"```validate\n" +
	"$.status == \"ACCEPTED\" | \"backend did not accept the message\"\n" +
	"```\n"

// TestDocQueueIdempotentReceiver covers the forward-order-idempotent
// example of "What you must do to be safe under redelivery": the
// Idempotency-Key the backend receives is the message's correlation ID and
// the same on every attempt of one message; a 200 whose body is not
// {"status":"ACCEPTED"} fails the delivery through its retries to the
// dead-letter queue with "backend did not accept the message"; an ACCEPTED
// answer is a delivery; a replay is a different message with a different
// key.
func TestDocQueueIdempotentReceiver(t *testing.T) {
	t.Parallel()
	var acceptAll atomic.Bool
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		body.ReadFrom(r.Body)
		status := "ACCEPTED"
		if !acceptAll.Load() && (strings.Contains(body.String(), `"I-2"`) || strings.Contains(body.String(), `"I-3"`)) {
			status = "REJECTED"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":%q}`, status)
	})
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order-idempotent.md": strings.Replace(idempotentFlow, "BACKEND", be.URL, 1),
	}, hostOptions{}, "forward-order-idempotent")
	const flowName = "forward-order-idempotent"
	calls := func(order string) []recorded {
		var out []recorded
		for _, x := range be.received() {
			if x.Path == "/ingest" && strings.Contains(x.Body, `"`+order+`"`) {
				out = append(out, x)
			}
		}
		return out
	}

	mustEnqueue(t, h, "acme", flowName, acmeKey, `{"orderId":"I-1","total":42}`, "X-Correlation-ID", "trace-idem-accepted")
	mustEnqueue(t, h, "acme", flowName, acmeKey, `{"orderId":"I-2","total":42}`, "X-Correlation-ID", "trace-idem-rejected")
	r := h.enqueue("acme", flowName, acmeKey, `{"orderId":"I-3","total":42}`)
	generated := r.header.Get("X-Correlation-Id")
	if r.status != http.StatusAccepted || !uuidRE.MatchString(generated) {
		t.Fatalf("enqueue without a correlation ID: %d %s, X-Correlation-Id %q", r.status, r.body, generated)
	}

	// the accepted message: one delivery
	ev := waitEvents(t, h, "queue_processed", 1, field("msg_id", 1), 15*time.Second)[0]
	if ev["outcome"] != "succeeded" || fmt.Sprint(ev["attempt"]) != "1" {
		t.Errorf("queue_processed of the accepted message: %v", ev)
	}
	if c := calls("I-1"); len(c) != 1 || c[0].Header.Get("Idempotency-Key") != "trace-idem-accepted" {
		t.Errorf("the accepted message: %d calls, Idempotency-Key %v", len(c), keys(c))
	}

	// the rejected ones: three attempts each, then the dead-letter queue
	const lastError = "step 'accepted-means-accepted': validation failed (Semantic): backend did not accept the message"
	for _, m := range []struct {
		id    int
		order string
		key   string
	}{{2, "I-2", "trace-idem-rejected"}, {3, "I-3", generated}} {
		moved := waitEvents(t, h, "dlq_moved", 1, field("msg_id", m.id), 20*time.Second)[0]
		if moved["last_error"] != lastError || fmt.Sprint(moved["attempts"]) != "3" || moved["correlation_id"] != m.key {
			t.Errorf("dlq_moved of %s: %v, want 3 attempts, last_error %q", m.order, moved, lastError)
		}
		c := calls(m.order)
		if len(c) != 3 {
			t.Errorf("%s: %d calls, want 3 attempts", m.order, len(c))
		}
		for i, x := range c {
			if got := x.Header.Get("Idempotency-Key"); got != m.key {
				t.Errorf("%s attempt %d: Idempotency-Key %q, want %q on every attempt: %v", m.order, i+1, got, m.key, keys(c))
			}
		}
	}
	if evs := h.events("queue_retry_scheduled"); len(evs) != 4 {
		t.Errorf("queue_retry_scheduled: %d events, want two per rejected message: %v", len(evs), evs)
	}
	list := dlqCLI(t, h.db, "list")
	want := `^DLQ: 2 pending message\(s\)\n` + dlqEntryRE(2, flowName, 3, lastError) + dlqEntryRE(3, flowName, 3, lastError) + `$`
	if list.code != 0 || !regexp.MustCompile(want).MatchString(list.stdout) {
		t.Errorf("dlq list: exit %d\n%s%s", list.code, list.stdout, list.stderr)
	}

	// a replay is a different message and gets a different key
	acceptAll.Store(true)
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", flowName, "--id", "2"); r.code != 0 || r.stdout != "replayed  id=2 tenant=acme flow="+flowName+"\n" {
		t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	ev = waitEvents(t, h, "queue_processed", 1, field("msg_id", 4), 15*time.Second)[0]
	if ev["outcome"] != "succeeded" || fmt.Sprint(ev["attempt"]) != "1" {
		t.Errorf("queue_processed of the replay: %v", ev)
	}
	c := calls("I-2")
	if len(c) != 4 {
		t.Fatalf("I-2: %d calls, want 3 attempts and the replay", len(c))
	}
	if k := c[3].Header.Get("Idempotency-Key"); k == "trace-idem-rejected" || !uuidRE.MatchString(k) {
		t.Errorf("the replay's Idempotency-Key %q, want a fresh correlation ID", k)
	}
}

// keys lists the Idempotency-Key headers of calls.
func keys(calls []recorded) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Header.Get("Idempotency-Key"))
	}
	return out
}

// TestDocQueueDiscardTwoStages covers "Discarding": nexus dlq discard
// prints the page's two lines and hides the entry from nexus dlq list at
// once; with no server running, dlq.log keeps the same bytes (the mark is
// only written to dlq.log.acked); the mark survives a restart; the first
// drain after the restart (its worker woken by a submission) rewrites
// dlq.log without the discarded body, keeps the entry nobody marked, and
// logs dlq_discarded.
func TestDocQueueDiscardTwoStages(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, repo := queueHost(t, map[string]string{
		"flows/acme/sync-invoices.md": fastInvoices(t, be.URL),
	}, hostOptions{}, "sync-invoices")
	db := h.db
	const secretBody, keptBody = `{"invoiceId":"INV-DISCARD-4471","total":0}`, `{"invoiceId":"INV-KEEP-2290","total":-1}`
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, secretBody)
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, keptBody)
	waitEvents(t, h, "dlq_moved", 2, nil, 20*time.Second)
	if code := h.stop(15 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	dir := filepath.Join(queuesRoot(db), "acme", "sync-invoices")
	dlqLog := filepath.Join(dir, "dlq.log")
	before, err := os.ReadFile(dlqLog)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(before, []byte(secretBody)) || !bytes.Contains(before, []byte(keptBody)) {
		t.Fatalf("dlq.log before the discard does not hold both payloads (%d bytes)", len(before))
	}

	r := dlqCLI(t, db, "discard", "--tenant", "acme", "--flow", "sync-invoices", "--id", "1")
	want := "discarded id=1 tenant=acme flow=sync-invoices\n" +
		"  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("dlq discard: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	onlyKept := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(2, "sync-invoices", 3, invoiceError) + `$`)
	if r := dlqCLI(t, db, "list"); r.code != 0 || !onlyKept.MatchString(r.stdout) {
		t.Errorf("dlq list right after the discard: exit %d\n%s%s\nwant id=1 gone at once", r.code, r.stdout, r.stderr)
	}
	after, err := os.ReadFile(dlqLog)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the discard with no server running changed dlq.log (%d bytes, then %d): it only writes the mark", len(before), len(after))
	}
	if info, err := os.Stat(filepath.Join(dir, "dlq.log.acked")); err != nil || info.Size() == 0 {
		t.Errorf("dlq.log.acked after the discard: %v, want the mark in it", err)
	}

	// the mark survives a restart
	h2 := startHost(t, hostOptions{repo: repo.dir, db: db})
	waitGate(t, h2, "acme", "sync-invoices", acmeKey)
	if r := dlqCLI(t, db, "list"); r.code != 0 || !onlyKept.MatchString(r.stdout) {
		t.Errorf("dlq list after the restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// a submission starts the worker; its first drain applies the mark
	mustEnqueue(t, h2, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-WAKE","total":5}`)
	waitEvents(t, h2, "queue_processed", 1, field("msg_id", 3), 15*time.Second)
	ev := waitEvents(t, h2, "dlq_discarded", 1, nil, 15*time.Second)[0]
	if fmt.Sprint(ev["msg_id"]) != "1" || ev["tenant"] != "acme" || ev["flow"] != "sync-invoices" {
		t.Errorf("dlq_discarded: %v, want dead letter 1 of acme/sync-invoices", ev)
	}
	if evs := h.events("dlq_discarded"); len(evs) != 0 {
		t.Errorf("the first process, stopped before the discard, logged dlq_discarded: %v", evs)
	}
	b, err := os.ReadFile(dlqLog)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("INV-DISCARD-4471")) {
		t.Errorf("dlq.log still holds the discarded body after the drain logged dlq_discarded")
	}
	if !bytes.Contains(b, []byte(keptBody)) {
		t.Errorf("dlq.log lost the entry nobody marked (%d bytes)", len(b))
	}
	if r := dlqCLI(t, db, "list"); r.code != 0 || !onlyKept.MatchString(r.stdout) {
		t.Errorf("dlq list after the drain: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := dlqCLI(t, db, "discard", "--tenant", "acme", "--flow", "sync-invoices", "--id", "1"); r.code != 1 || r.stderr != "no pending dead letter id=1 tenant=acme flow=sync-invoices\n" {
		t.Errorf("discarding it again (no command brings it back): exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}
