package host_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// TestDedupStoreUnavailableUsesNoAttempt: a retry-later verdict (registry
// or dedup store unavailable) does not use up an attempt (server.md,
// "Precise answers"). A queued message of a deduplicating flow whose dedup
// store cannot be read (its database is closed) is put back on the retry
// schedule at attempt 1, and not dead-lettered, though the flow allows one
// attempt only: an ordinary failure of that attempt would dead-letter it.
func TestDedupStoreUnavailableUsesNoAttempt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg, err := registry.Open(ctx, filepath.Join(dir, "state", "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	// the dedup store: another registry's, closed before the delivery
	gone, err := registry.Open(ctx, filepath.Join(dir, "gone", "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()

	var srv atomic.Pointer[host.Server]
	verdicts := make(chan queue.Verdict, 4)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// the fake clock is never advanced: the retry, due one second on, stays scheduled
	m := queue.NewManager(queue.ManagerConfig{Root: filepath.Join(dir, "state", "queues"), Logger: logger, Clock: clocktest.New(t0),
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
			v := srv.Load().Handle(ctx, d)
			verdicts <- v
			return v
		})})
	t.Cleanup(m.Stop)
	s := host.New(host.Config{Live: reg, Status: reg, Engine: engine.New(engine.Config{Dedup: gone.Dedup()}),
		Metrics: host.NewMetrics(), Logger: logger, Queues: m})
	srv.Store(s)
	fx := &fixture{t: t, reg: reg, handler: s.Handler()}
	files := testFlows()
	files["flows/acme/dd.md"] = flowFile("acme", "dd", "dedup_key: \"{{ $.id }}\"\nqueue_max_attempts: 1\n", echoSteps)
	fx.publish(files, testAccessYAML(), fixtureCommit)

	w := fx.serve(newRequest(http.MethodPost, "/flows/acme/dd/enqueue", `{"id":"A-1"}`,
		"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
	if w.Code != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", w.Code, w.Body)
	}
	var v queue.Verdict
	select {
	case v = <-verdicts:
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not delivered within 10 s")
	}
	if v.Kind != queue.VerdictRetryLater || !strings.HasPrefix(v.Error, "flow state is unavailable") {
		t.Errorf("the delivery with the dedup store unavailable: verdict %d %q, want a retry later (%d)", v.Kind, v.Error, queue.VerdictRetryLater)
	}
	q, err := m.Peek("acme", "dd")
	if err != nil {
		t.Fatal(err)
	}
	var rs []queue.Retry
	for deadline := time.Now().Add(10 * time.Second); len(rs) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if rs, err = q.Retries(); err != nil {
			t.Fatal(err)
		}
	}
	if len(rs) != 1 || rs[0].ID != 1 || rs[0].Attempt != 1 {
		t.Errorf("the retry schedule %+v, want message 1 due again at attempt 1", rs)
	}
	if dl, _, err := q.DeadLetters(); err != nil || len(dl) > 0 {
		t.Errorf("dead letters %+v (%v), want none: the attempt was not used up", dl, err)
	}
}
