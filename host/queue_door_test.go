package host_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// TestEnqueueOverAFrameIs413: a flow may raise its ceiling
// (max_body_bytes) past what a queued message holds (queue.MaxPayload). A
// body under the flow's ceiling but over that answers 413 without
// Retry-After (it will never fit), not the 503 of a failed write, which
// would have its caller retry for ever; its queue_enqueue_failed line is a
// warning, the caller's doing.
func TestEnqueueOverAFrameIs413(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	files := adminFlows()
	files["flows/acme/big.md"] = flowFile("acme", "big", "max_body_bytes: 100000000\n", echoSteps)
	fx.publish(files, testAccessYAML(), "1123456789abcdef0123456789abcdef01234567")

	body := `"` + strings.Repeat("a", 65<<20) + `"` // 65 MiB: under the flow's ceiling
	r := newRequest(http.MethodPost, "/flows/acme/big/enqueue", body,
		"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json")
	w := fx.serve(r)
	want := `{"ok":false,"error":"the message exceeds 67107564 bytes, the most a queued message holds"}`
	if w.Code != http.StatusRequestEntityTooLarge || w.Header().Get("Retry-After") != "" || w.Body.String() != want {
		t.Errorf("a message too large for a queue frame: %d with Retry-After %q, body %s; want 413 %s",
			w.Code, w.Header().Get("Retry-After"), w.Body, want)
	}
	// the caller sent too much: logged as the event it is, at warn, not
	// at error (the queue did not fail); it was an error
	evs := fx.logs.Events(t, "queue_enqueue_failed")
	if len(evs) != 1 || evs[0]["level"] != "WARN" || evs[0]["tenant"] != "acme" || evs[0]["flow"] != "big" {
		t.Errorf("queue_enqueue_failed lines %v, want one for acme/big at WARN", evs)
	}
}

// TestShutdownLetsADeliveryInFlightPublish: a delivery in flight when the
// queues stop (queue.Manager.Stop) runs to its end, its queue_publish step
// included, rather than failing into a dead letter (queue_max_attempts: 1)
// after its http_egress effect happened.
func TestShutdownLetsADeliveryInFlightPublish(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"orderId":"A-1"}`))
	}))
	t.Cleanup(be.Close)

	fx, m := newPublishingFixture(t)
	files := testFlows()
	files["flows/acme/a.md"] = flowFile("acme", "a", "effects: [http_egress, queue_publish]\nqueue_max_attempts: 1\n",
		"## Step: call\neffects: [http_egress]\nendpoint: "+be.URL+"/orders\nmethod: POST\n\n## Step: hand-off\neffects: [queue_publish]\nqueue: b\n")
	files["flows/acme/b.md"] = flowFile("acme", "b", "", echoSteps)
	fx.publish(files, testAccessYAML(), fixtureCommit)

	w := fx.serve(newRequest(http.MethodPost, "/flows/acme/a/enqueue", `{"orderId":"A-1"}`,
		"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
	if w.Code != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", w.Code, w.Body)
	}
	<-entered // the delivery is in flight, in its http_egress step
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	// Stop has no signal of its own: give it a generous moment to begin
	time.Sleep(100 * time.Millisecond)
	close(release)
	<-stopped

	q, err := m.Peek("acme", "a")
	if err != nil {
		t.Fatal(err)
	}
	dl, _, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) > 0 {
		t.Errorf("a delivery in flight at shutdown was dead-lettered by the shutdown: %+v", dl[0].LastError)
	}
	if rs, _ := q.Retries(); len(rs) > 0 {
		t.Errorf("a delivery in flight at shutdown used up an attempt: retry scheduled %+v", rs)
	}
}

// newPublishingFixture is a Server with queues whose engine publishes
// (queue_publish) through the Server itself, as nexus serve wires them; its
// flows are not published yet.
func newPublishingFixture(t *testing.T) (*fixture, *queue.Manager) {
	t.Helper()
	fx, m, _ := newPublishingFixtureAt(t)
	return fx, m
}

// newPublishingFixtureAt is newPublishingFixture, with the queues' root.
func newPublishingFixtureAt(t *testing.T) (*fixture, *queue.Manager, string) {
	t.Helper()
	dir := t.TempDir()
	reg, err := registry.Open(context.Background(), filepath.Join(dir, "state", "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	var srv atomic.Pointer[host.Server]
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	root := filepath.Join(dir, "state", "queues")
	m := queue.NewManager(queue.ManagerConfig{Root: root, Logger: logger,
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict { return srv.Load().Handle(ctx, d) })})
	eng := engine.New(engine.Config{Dedup: reg.Dedup(), Publisher: serverPublisher{&srv}})
	s := host.New(host.Config{Live: reg, Status: reg, Engine: eng, Metrics: host.NewMetrics(), Logger: logger, Queues: m})
	srv.Store(s)
	return &fixture{t: t, reg: reg, handler: s.Handler()}, m, root
}

// TestPublishedMessageRunsAtTheEnqueueDoor: a message a queue_publish step
// put on another flow's queue runs there with ctx.door = enqueue
// (flow-file.md, Precise answers), attempt 1, and the publisher's
// correlation ID.
func TestPublishedMessageRunsAtTheEnqueueDoor(t *testing.T) {
	got := make(chan string, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(be.Close)
	fx, m := newPublishingFixture(t)
	t.Cleanup(m.Stop)
	files := testFlows()
	files["flows/acme/a.md"] = flowFile("acme", "a", "effects: [queue_publish]\n", "## Step: hand-off\neffects: [queue_publish]\nqueue: b\n")
	files["flows/acme/b.md"] = flowFile("acme", "b", "effects: [http_egress]\n",
		"## Step: describe\n```ntd\n"+`{"door": "{{ ctx.door }}", "attempt": {{ ctx.attempt }}, "cid": "{{ ctx.correlation_id }}", "doc": {{ $ }}}`+"\n```\n\n"+
			"## Step: report\neffects: [http_egress]\nendpoint: "+be.URL+"/seen\nmethod: POST\n")
	fx.publish(files, testAccessYAML(), fixtureCommit)

	w := fx.serve(runRequest("acme", "a", keyAcmeAll, `{"orderId":"A-1"}`, "X-Correlation-ID", "trace-publish"))
	if w.Code != http.StatusOK {
		t.Fatalf("run a: %d %s", w.Code, w.Body)
	}
	select {
	case body := <-got:
		if want := `{"door":"enqueue","attempt":1,"cid":"trace-publish","doc":{"orderId":"A-1"}}`; body != want {
			t.Errorf("the published message ran with %s, want %s", body, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the published message did not run within 10 s")
	}
}

// serverPublisher publishes through a host.Server set after the engine
// is built.
type serverPublisher struct{ s *atomic.Pointer[host.Server] }

func (p serverPublisher) Publish(ctx context.Context, tenant, flowName string, payload []byte, cid string) error {
	return p.s.Load().Publish(ctx, tenant, flowName, payload, cid)
}

// deepSiblingsXML is an XML document within the doors' limits (levels+1
// elements deep) whose repeated siblings make its flattened form nest
// about twice as deep: each level an object holding an array.
func deepSiblingsXML(levels int) string {
	inner := "v"
	for range levels {
		inner = "<a>" + inner + "</a><a>z</a>"
	}
	return "<r>" + inner + "</r>"
}

// TestEnqueuedXMLIsDeliverable: an XML body within the doors' limits,
// whose flattened form nests deeper than a JSON body may (repeated
// siblings add an array level under each element), is answered 202 and
// runs its flow: the worker reads what the door stored (it was once
// dead-lettered unrun, "not a JSON document").
func TestEnqueuedXMLIsDeliverable(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	r := newRequest(http.MethodPost, "/flows/acme/echo/enqueue", deepSiblingsXML(40),
		"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/xml")
	w := fx.serve(r)
	if w.Code != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s, want 202 (as /run runs it)", w.Code, w.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range fx.journal(t, "tenant=acme&flow=echo") {
			if e.MsgID == 1 {
				return // the flow ran
			}
		}
		if ids := fx.pendingIDs(t, "acme", "echo"); len(ids) > 0 {
			w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq")
			t.Fatalf("a message answered 202 was dead-lettered without running its flow: %.400s", w.Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the message was neither delivered nor dead-lettered within 10 s")
}

// TestDoorLinesNameTheKey: run_completed and queue_enqueued name the key
// that called, by its id (server.md: "id: … named in logs and the UI;
// never the secret"). No log line named it, so the log could not say who
// sent a message. run_completed carries the attempt, 1.
func TestDoorLinesNameTheKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, door := range []string{"run", "enqueue"} {
		w := fx.serve(newRequest(http.MethodPost, "/flows/acme/echo/"+door, `{"n":1}`,
			"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json", "X-Correlation-ID", "trace-"+door))
		if w.Code >= 300 {
			t.Fatalf("%s: %d %s", door, w.Code, w.Body)
		}
	}
	for event, cid := range map[string]string{"run_completed": "trace-run", "queue_enqueued": "trace-enqueue"} {
		evs := fx.logs.Events(t, event)
		if len(evs) != 1 || evs[0]["correlation_id"] != cid || evs[0]["key"] != "acme-all" {
			t.Errorf("%s events %v, want one naming the key acme-all", event, evs)
		}
		// every /run is attempt 1, as its journal row says (server.md:
		// "attempt where they apply"); the line had none
		if event == "run_completed" && (len(evs) != 1 || evs[0]["attempt"] != 1.0) {
			t.Errorf("run_completed events %v, want attempt 1", evs)
		}
		if strings.Contains(fx.logs.String(), keyAcmeAll) {
			t.Errorf("the log holds the key itself:\n%s", fx.logs.String())
		}
	}
}

// TestFaultHandledDeliveryLineSaysTheError: the worker's queue_processed
// line of a delivery the fault sequence answered carries the main
// sequence's error, as run_completed does for /run: it is the line
// queues-retries-dlq.md has operators watch for a handler that keeps
// failures from the dead-letter queue. It said the outcome and the step,
// not the error. It is a warning, as run_completed's of the same outcome
// is (it was logged as info).
func TestFaultHandledDeliveryLineSaysTheError(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("guarded", "",
		"## Step: check\n```validate\n$.orderId != null | \"orderId is required\"\n```\n\n## Fault: answer\n```ntd\n{\"rejected\": true}\n```\n")
	fx.enqueue(t, "guarded", `{}`)
	evs := fx.waitLogEvents(t, "queue_processed", 1)
	if len(evs) != 1 || evs[0]["outcome"] != "fault_handled" || evs[0]["error"] != "step 'check': validation failed (Semantic): orderId is required" || evs[0]["level"] != "WARN" {
		t.Errorf("queue_processed events %v, want one fault_handled warning naming the error", evs)
	}
}

// TestDeadLetterKeepsThePayloadAsSubmitted: a message /enqueue took is
// stored as it was received, so its dead letter keeps the payload as
// submitted (queues-retries-dlq.md). It was stored re-encoded from the
// parsed document: a whole number past 64 bits lost its last digits. A
// byte order mark before the JSON, which the door accepts, is not kept.
func TestDeadLetterKeepsThePayloadAsSubmitted(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("reject", "queue_max_attempts: 1\n",
		"## Step: check\n```validate\n$.nope != null | \"nope is required\" | semantic\n```\n")
	const body = `{"orderId":12345678901234567890}`
	fx.enqueue(t, "reject", body)
	fx.enqueue(t, "reject", "\uFEFF"+`{"orderId":2}`)
	var got struct {
		DeadLetters []struct {
			Payload string `json:"payload"`
		} `json:"dead_letters"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(got.DeadLetters) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters within 10 s, want 2", len(got.DeadLetters))
		}
		time.Sleep(20 * time.Millisecond)
		a := fx.admin(http.MethodGet, "/api/queues/acme/reject/dlq")
		if a.Code != http.StatusOK {
			t.Fatalf("dlq: %d %s", a.Code, a.Body)
		}
		if err := json.Unmarshal(a.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
	}
	if p := got.DeadLetters[0].Payload; p != body {
		t.Errorf("the dead letter's payload is %s, the caller submitted %s", p, body)
	}
	if p := got.DeadLetters[1].Payload; p != `{"orderId":2}` {
		t.Errorf("the dead letter's payload is %q, want the JSON without its byte order mark", p)
	}
}

// TestReplayedFaultHandledDeliveryClaimsNoError: the replay of a
// fault-handled answer (a duplicate under dedup_on_failure: absorb), in
// which nothing failed, logs no error; its queue_processed line said
// "internal error".
func TestReplayedFaultHandledDeliveryClaimsNoError(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("guarded", "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\n",
		"## Step: check\n```validate\n$.amount != null | \"amount is required\"\n```\n\n## Fault: answer\n```ntd\n{\"rejected\": true}\n```\n")
	fx.enqueue(t, "guarded", `{"orderId":"A-1"}`)
	fx.enqueue(t, "guarded", `{"orderId":"A-1"}`)
	evs := fx.waitLogEvents(t, "queue_processed", 2)
	if len(evs) != 2 {
		t.Fatalf("queue_processed events %v, want two", evs)
	}
	second := evs[1]
	if second["replay"] != true {
		t.Fatalf("the second delivery's line %v is not a replay", second)
	}
	if errText, ok := second["error"]; ok {
		t.Errorf("the replayed delivery's queue_processed line claims an error (%v): %v", errText, second)
	}
}

// publishWith publishes the admin fixture's flows and acme/name besides,
// as commit c2.
func (fx *adminFixture) publishWith(name, frontMatter, steps string) {
	files := adminFlows()
	files["flows/acme/"+name+".md"] = flowFile("acme", name, frontMatter, steps)
	fx.publish(files, testAccessYAML(), "c2")
}

// enqueue submits body to acme/name's /enqueue with the all-flows key and
// wants its 202.
func (fx *adminFixture) enqueue(t *testing.T, name, body string) {
	t.Helper()
	w := fx.serve(newRequest(http.MethodPost, "/flows/acme/"+name+"/enqueue", body,
		"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
	if w.Code != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", w.Code, w.Body)
	}
}

// waitLogEvents waits up to 10 s for n log lines of event and returns
// those there are then.
func (fx *adminFixture) waitLogEvents(t *testing.T, event string, n int) []map[string]any {
	t.Helper()
	evs := fx.logs.Events(t, event)
	for deadline := time.Now().Add(10 * time.Second); len(evs) < n && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		evs = fx.logs.Events(t, event)
	}
	return evs
}

// TestPublishHonoursTheCeilingWhileTheLockIsHeld: a queue_publish step
// whose target's append lock another process holds (paused while it
// appends) gives up at the flow's ceiling (timeout_ms: 200), answering
// its 500, well before the queue's LockWait (5 s), and writes nothing,
// whether this process had the target's queue open or opens it (Open
// waits for the lock too). It waited for the lock as long as LockWait,
// and wrote the message behind the ceiling's 500 if the lock was let go
// meanwhile, which its caller would retry: published twice.
func TestPublishHonoursTheCeilingWhileTheLockIsHeld(t *testing.T) {
	for _, open := range []bool{true, false} {
		name := "the target open"
		if !open {
			name = "the target opened by the publish"
		}
		t.Run(name, func(t *testing.T) {
			fx, m, root := newPublishingFixtureAt(t)
			files := testFlows()
			files["flows/acme/a.md"] = flowFile("acme", "a", "effects: [queue_publish]\ntimeout_ms: 200\n",
				"## Step: hand-off\neffects: [queue_publish]\nqueue: b\n")
			files["flows/acme/b.md"] = flowFile("acme", "b", "", echoSteps)
			fx.publish(files, testAccessYAML(), fixtureCommit)
			if open {
				if _, _, err := m.Queue("acme", "b"); err != nil {
					t.Fatal(err)
				}
			} else {
				// the target's files, made by another process
				q, _, err := queue.Open(root, "acme", "b", queue.Options{})
				if err != nil {
					t.Fatal(err)
				}
				q.Close()
			}
			lock, err := os.OpenFile(filepath.Join(root, "acme", "b", "append.lock"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			w := fx.serve(newRequest(http.MethodPost, "/flows/acme/a/run", `{"orderId":"A-1"}`,
				"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
			took := time.Since(start)
			const want = `{"ok":false,"error":"duration ceiling of 200 ms reached","step":"hand-off"}`
			if w.Code != http.StatusInternalServerError || strings.TrimSpace(w.Body.String()) != want {
				t.Errorf("run with the target's lock held: %d %s, want 500 %s", w.Code, w.Body, want)
			}
			if took > 2*time.Second {
				t.Errorf("run with the target's lock held answered after %v, want about 200 ms (its ceiling)", took)
			}

			syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			time.Sleep(200 * time.Millisecond) // what a wait left behind could write, it has
			if st, err := os.Stat(filepath.Join(root, "acme", "b", "segment.log")); err != nil || st.Size() != 0 {
				t.Errorf("the target's log after the ceiling's 500: %v (%v), want empty: the message was published anyway", st, err)
			}
		})
	}
}
