package host_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
)

// TestPublishRefusesATargetWhoseArtifactIsCorrupt: flow-file.md, Precise
// answers, a queue_publish step fails "with `effect handler failed: …`
// (502) when the target flow is not live or no worker can be started for
// it; both are checked before anything is written". A flow whose stored
// artifact fails its integrity check, or whose source this build refuses,
// is deployed but cannot run (every message of it is dead-lettered unrun;
// CanReplay refuses it as not live): the publishing step fails, saying
// which, and nothing reaches the target's queue. It was accepted and
// dead-lettered at the target, the publisher's caller answered 200.
func TestPublishRefusesATargetWhoseArtifactIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		artifact []byte // b's stored artifact, under its own hash
		why      string
	}{
		{"bytes that are no artifact", []byte("garbage"), "its artifact failed its integrity check"},
		// an upgrade whose compiler refuses what an earlier one took
		{"a source this build refuses", staleSource(flowFile("acme", "b", "", echoSteps)), "its stored version does not compile under this build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, m, root := newPublishingFixtureAt(t)
			t.Cleanup(m.Stop)
			files := testFlows()
			files["flows/acme/a.md"] = flowFile("acme", "a", "effects: [queue_publish]\n", "## Step: hand-off\neffects: [queue_publish]\nqueue: b\n")
			files["flows/acme/b.md"] = flowFile("acme", "b", "", echoSteps)
			fx.publish(files, testAccessYAML(), fixtureCommit)

			db, err := sql.Open("sqlite", filepath.Join(filepath.Dir(root), "registry.db"))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(tc.artifact)
			if _, err := db.Exec(`UPDATE flow_versions SET artifact = ?, sha256 = ? WHERE tenant = 'acme' AND flow = 'b'`, tc.artifact, hex.EncodeToString(sum[:])); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if _, err := fx.reg.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			if lf, ok := fx.reg.Live().Lookup("acme", "b"); !ok || lf.Corrupt == nil {
				t.Fatalf("acme/b is not loaded as corrupt: %+v", lf)
			}

			srv := host.New(host.Config{Live: fx.reg, Status: fx.reg, Queues: m, Metrics: host.NewMetrics(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			err = srv.Publish(context.Background(), "acme", "b", []byte(`{"orderId":"A-1"}`), "cid-1")
			if want := "flow acme/b is not live: " + tc.why; err == nil || err.Error() != want {
				t.Errorf("Publish to a corrupt target: %v, want %q", err, want)
			}
			w := fx.serve(runRequest("acme", "a", keyAcmeAll, `{"orderId":"A-1"}`))
			if w.Code != http.StatusBadGateway || w.Body.String() != `{"ok":false,"error":"flow execution failed"}` {
				t.Errorf("run a: %d %s, want 502 {\"ok\":false,\"error\":\"flow execution failed\"}", w.Code, w.Body)
			}
			for _, name := range []string{"segment.log", "dlq.log"} {
				if fi, err := os.Stat(filepath.Join(root, "acme", "b", name)); err == nil && fi.Size() > 0 {
					t.Errorf("%s of acme/b holds %d bytes: a message was written", name, fi.Size())
				}
			}
		})
	}
}

// staleSource is an artifact, as an earlier compiler wrote it, of src with
// a flowmarkdown_version this build refuses.
func staleSource(src string) []byte {
	src = strings.Replace(src, `flowmarkdown_version: "0.1"`, `flowmarkdown_version: "0.2"`, 1)
	return []byte(fmt.Sprintf("nexus-flow-artifact 1\ncompiler flowmarkdown-0.1/12\nsource %d\n%s", len(src), src))
}
