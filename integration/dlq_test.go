package integration

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// The retry schedule and the dead-letter CLI end to end: the worked
// example of "Queues, retries and the DLQ" against a backend answering
// 503, then nexus dlq list, replay and discard exactly as printed.

// nexusEnv runs the binary like nexus, with the test's environment minus
// its NEXUS_ variables plus env.
func nexusEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := nexusCmd("", args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEXUS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running nexus %v: %v", args, err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: code}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		t.Fatalf("nexus %v printed a stack trace:\n%s", args, r.stderr)
	}
	return r
}

// dlqCLI runs nexus dlq args… --db db.
func dlqCLI(t *testing.T, db string, args ...string) result {
	t.Helper()
	return nexus(t, "", append(append([]string{"dlq"}, args...), "--db", db)...)
}

// rfc3339 is a time as the CLI prints it: RFC 3339, UTC, whole seconds.
const rfc3339 = `(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)`

// dlqEntryRE matches one entry of nexus dlq list, capturing both times.
// flowName is a flow of acme, or tenant/flow.
func dlqEntryRE(id int, flowName string, attempts int, lastError string) string {
	tenant := "acme"
	if tn, fn, ok := strings.Cut(flowName, "/"); ok {
		tenant, flowName = tn, fn
	}
	return fmt.Sprintf("\n  id=%d tenant=%s flow=%s\n    enqueued_at: %s\n    failed_at:   %s\n    attempts:    %d\n    last_error:  %s\n",
		id, tenant, flowName, rfc3339, rfc3339, attempts, regexp.QuoteMeta(lastError))
}

const (
	forwardError = "step 'forward': effect handler failed: HTTP 503 Service Unavailable"
	invoiceError = "step 'check': validation failed (Semantic): total must be positive"
)

// fastInvoices is the example sync-invoices flow (its check fails every
// message with a total below 1; default retries, 3 attempts, factor 2),
// calling backendURL, with its first retry delay shortened to 100 ms.
func fastInvoices(t *testing.T, backendURL string) string {
	t.Helper()
	return queueExample(t, "sync-invoices", backendURL, "effects: [http_egress]\n---", "effects: [http_egress]\nqueue_initial_delay_ms: 100\n---")
}

func TestDLQWorkedExample(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	const globexKey = "test-key-globex"
	invoices := fastInvoices(t, be.URL)
	h, repo := queueHost(t, map[string]string{
		"access.yaml": accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey},
			testKey{id: "globex-all", tenant: "globex", key: globexKey}),
		"flows/acme/forward-order.md":   queueExample(t, "forward-order", be.URL),
		"flows/acme/sync-invoices.md":   invoices,
		"flows/globex/sync-invoices.md": strings.Replace(invoices, "tenant: acme", "tenant: globex", 1),
	}, hostOptions{}, "forward-order", "sync-invoices")
	waitGate(t, h, "globex", "sync-invoices", globexKey)
	db := h.db
	if r := dlqCLI(t, db, "list"); r.code != 0 || r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list on a fresh installation: %d %q %s", r.code, r.stdout, r.stderr)
	}

	start := time.Now()
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1","total":42}`, "X-Correlation-ID", "trace-worked-example")
	enqueued := time.Now()
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-SECRET-7731","total":0}`, "X-Correlation-ID", "trace-invoice")
	mustEnqueue(t, h, "globex", "sync-invoices", globexKey, `{"invoiceId":"GLOBEX-1","total":0}`)

	// five attempts, 500, 1500, 4500 and 10000 ms apart: the delays are
	// checked exactly below (queue_retry_scheduled's delay_ms); at the
	// backend, no attempt comes early, and lateness on a loaded machine
	// gets generous slack
	attempts := be.waitOn(t, "/ingest", 5, 60*time.Second)
	for i, want := range []time.Duration{500, 1500, 4500, 10000} {
		want *= time.Millisecond
		gap := attempts[i+1].at.Sub(attempts[i].at)
		if gap < want-50*time.Millisecond || gap > want+10*time.Second {
			t.Errorf("attempt %d came %v after attempt %d, want %v", i+2, gap, i+1, want)
		} else {
			t.Logf("attempt %d: %v after attempt %d (schedule %v)", i+2, gap.Round(time.Millisecond), i+1, want)
		}
	}
	for i, a := range attempts {
		if a.body != `{"orderId":"A-1","total":42}` || a.header.Get("X-Correlation-Id") != "trace-worked-example" {
			t.Errorf("attempt %d: %s with X-Correlation-Id %q: every attempt carries the original payload and correlation ID", i+1, a.body, a.header.Get("X-Correlation-Id"))
		}
	}
	moved := waitEvents(t, h, "dlq_moved", 1, field("flow", "forward-order"), 10*time.Second)[0]
	movedSeen := time.Now()
	if moved["correlation_id"] != "trace-worked-example" || fmt.Sprint(moved["msg_id"]) != "1" || moved["tenant"] != "acme" {
		t.Errorf("dlq_moved: %v", moved)
	}
	retries := h.events("queue_retry_scheduled")
	var delays []string
	for _, r := range retries {
		if r["flow"] == "forward-order" {
			delays = append(delays, fmt.Sprint(r["delay_ms"]))
		}
	}
	if strings.Join(delays, ",") != "500,1500,4500,10000" {
		t.Errorf("queue_retry_scheduled delays %v, want 500,1500,4500,10000", delays)
	}
	waitEvents(t, h, "dlq_moved", 1, both(field("tenant", "acme"), field("flow", "sync-invoices")), 5*time.Second)
	waitEvents(t, h, "dlq_moved", 1, both(field("tenant", "globex"), field("flow", "sync-invoices")), 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := len(attempts); len(be.on("/ingest")) != 5 || n != 5 {
		t.Errorf("%d attempts, want 5", len(be.on("/ingest")))
	}

	// the listing, as printed
	t.Run("list", func(t *testing.T) {
		r := dlqCLI(t, db, "list", "--tenant", "acme", "--flow", "forward-order")
		one := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(1, "forward-order", 5, forwardError) + `$`)
		m := one.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("dlq list --tenant acme --flow forward-order: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		enq, _ := time.Parse(time.RFC3339, m[1])
		failed, _ := time.Parse(time.RFC3339, m[2])
		// both while the test watched: enqueued_at during the submission,
		// failed_at before the dlq_moved event was seen (the times have
		// whole seconds)
		if enq.Before(start.Truncate(time.Second)) || enq.After(enqueued) {
			t.Errorf("enqueued_at %s, the message was submitted between %s and %s", m[1], start.UTC().Format(time.RFC3339Nano), enqueued.UTC().Format(time.RFC3339Nano))
		}
		if d := failed.Sub(enq); d < 16*time.Second || failed.After(movedSeen) {
			t.Errorf("failed_at %s is %v after enqueued_at %s, want the 16.5 s of retrying, and before the dead letter was seen at %s", m[2], d, m[1], movedSeen.UTC().Format(time.RFC3339Nano))
		}

		fo, si, gsi := dlqEntryRE(1, "forward-order", 5, forwardError), dlqEntryRE(1, "sync-invoices", 3, invoiceError), dlqEntryRE(1, "globex/sync-invoices", 3, invoiceError)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"list"}, `^DLQ: 3 pending message\(s\)\n` + fo + si + gsi + `$`},
			{[]string{"list", "--tenant", "acme"}, `^DLQ: 2 pending message\(s\)\n` + fo + si + `$`},
			{[]string{"list", "--flow", "sync-invoices"}, `^DLQ: 2 pending message\(s\)\n` + si + gsi + `$`},
			{[]string{"list", "--tenant", "globex"}, `^DLQ: 1 pending message\(s\)\n` + gsi + `$`},
			{[]string{"list", "--tenant", "globex", "--flow", "sync-invoices"}, `^DLQ: 1 pending message\(s\)\n` + gsi + `$`},
		} {
			if r := dlqCLI(t, db, c.args...); r.code != 0 || !regexp.MustCompile(c.want).MatchString(r.stdout) {
				t.Errorf("dlq %v: exit %d\n%s%s\nwant the entries sorted by tenant, flow and id, with the blank lines of the doc", c.args, r.code, r.stdout, r.stderr)
			}
		}
		for _, args := range [][]string{{"list", "--tenant", "initech"}, {"list", "--tenant", "globex", "--flow", "forward-order"}, {"list", "--tenant", "acme", "--flow", "nope"}, {"list", "--flow", "forward-order-alerting"}} {
			if r := dlqCLI(t, db, args...); r.code != 0 || r.stdout != "DLQ is empty\n" {
				t.Errorf("dlq %v: exit %d %q %s", args, r.code, r.stdout, r.stderr)
			}
		}
	})

	t.Run("replay", func(t *testing.T) {
		be.setStatus(http.StatusOK) // the cause fixed first
		before := len(be.on("/ingest"))
		r := dlqCLI(t, db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1")
		replayed := time.Now()
		if r.code != 0 || r.stdout != "replayed  id=1 tenant=acme flow=forward-order\n" {
			t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if r := dlqCLI(t, db, "list"); !regexp.MustCompile(`^DLQ: 2 pending message\(s\)\n` + dlqEntryRE(1, "sync-invoices", 3, invoiceError) + dlqEntryRE(1, "globex/sync-invoices", 3, invoiceError) + `$`).MatchString(r.stdout) {
			t.Errorf("dlq list after the replay:\n%s", r.stdout)
		}
		// the running worker picks it up at one of its polls (every 500
		// ms), with no submission to wake it; the delay is logged, not
		// bound: a timeout generous for a loaded machine is the bound
		got := be.waitOn(t, "/ingest", before+1, 10*time.Second)[before]
		t.Logf("the replayed message was delivered %v after the replay", got.at.Sub(replayed).Round(time.Millisecond))
		cid := got.header.Get("X-Correlation-Id")
		if got.body != `{"orderId":"A-1","total":42}` || cid == "trace-worked-example" || !uuidRE.MatchString(cid) {
			t.Errorf("replayed delivery %s with X-Correlation-Id %q: want the payload as submitted under a fresh correlation ID", got.body, cid)
		}
		ev := waitEvents(t, h, "queue_processed", 1, field("flow", "forward-order"), 5*time.Second)[0]
		if fmt.Sprint(ev["msg_id"]) != "2" || fmt.Sprint(ev["attempt"]) != "1" || ev["outcome"] != "succeeded" || ev["correlation_id"] != cid {
			t.Errorf("queue_processed of the replay: %v, want a new message (id 2) on attempt 1", ev)
		}
		// the server's log records the operator's action once its worker applied it
		ev = waitEvents(t, h, "dlq_replayed", 1, field("flow", "forward-order"), 5*time.Second)[0]
		if fmt.Sprint(ev["msg_id"]) != "1" || fmt.Sprint(ev["replay_msg_id"]) != "2" || ev["tenant"] != "acme" {
			t.Errorf("dlq_replayed: %v, want dead letter 1 replayed as message 2", ev)
		}
		// the ids count on: the next submission is message 3
		if id := mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-2"}`); id != 3 {
			t.Errorf("X-Nexus-Message-Id %d after the replay's message 2, want 3", id)
		}
		r = dlqCLI(t, db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1")
		if r.code != 1 || r.stdout != "" || r.stderr != "no pending dead letter id=1 tenant=acme flow=forward-order\n" {
			t.Errorf("replaying it again: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("discard", func(t *testing.T) {
		dlqLog := filepath.Join(queuesRoot(db), "acme", "sync-invoices", "dlq.log")
		if b, err := os.ReadFile(dlqLog); err != nil || !bytes.Contains(b, []byte("INV-SECRET-7731")) {
			t.Fatalf("dlq.log before the discard: %v, holds the payload: %v", err, bytes.Contains(b, []byte("INV-SECRET-7731")))
		}
		r := dlqCLI(t, db, "discard", "--tenant", "acme", "--flow", "sync-invoices", "--id", "1")
		want := "discarded id=1 tenant=acme flow=sync-invoices\n" +
			"  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings\n"
		if r.code != 0 || r.stdout != want {
			t.Fatalf("dlq discard: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		// acme's id 1 only: the same id in globex's queue of the same name stays
		if r := dlqCLI(t, db, "list"); !regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(1, "globex/sync-invoices", 3, invoiceError) + `$`).MatchString(r.stdout) {
			t.Errorf("dlq list right after the discard:\n%s", r.stdout)
		}
		// the worker of sync-invoices runs: its next idle loop rewrites dlq.log
		eventually(t, 5*time.Second, "the discarded body gone from dlq.log", func() bool {
			b, err := os.ReadFile(dlqLog)
			return err == nil && !bytes.Contains(b, []byte("INV-SECRET-7731"))
		})
		ev := waitEvents(t, h, "dlq_discarded", 1, both(field("tenant", "acme"), field("flow", "sync-invoices")), 5*time.Second)[0]
		if fmt.Sprint(ev["msg_id"]) != "1" {
			t.Errorf("dlq_discarded: %v, want dead letter 1", ev)
		}
		r = dlqCLI(t, db, "discard", "--tenant", "acme", "--flow", "sync-invoices", "--id", "1")
		if r.code != 1 || r.stderr != "no pending dead letter id=1 tenant=acme flow=sync-invoices\n" {
			t.Errorf("discarding it again: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		r = dlqCLI(t, db, "discard", "--tenant", "globex", "--flow", "sync-invoices", "--id", "1")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "discarded id=1 tenant=globex flow=sync-invoices\n") {
			t.Errorf("dlq discard of globex's: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if r := dlqCLI(t, db, "list"); r.stdout != "DLQ is empty\n" {
			t.Errorf("dlq list after both discards:\n%s", r.stdout)
		}
	})

	// one more dead letter, then the server stops: the state directory is
	// still while the CLI is checked for what it must not write
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-2","total":-1}`)
	waitEvents(t, h, "dlq_moved", 2, both(field("tenant", "acme"), field("flow", "sync-invoices")), 5*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	pending := `^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(2, "sync-invoices", 3, invoiceError) + `$`

	t.Run("an id that is not pending", func(t *testing.T) {
		before := snapshot(t, filepath.Dir(db))
		for _, args := range [][]string{
			{"replay", "--tenant", "acme", "--flow", "forward-order", "--id", "9"},
			{"discard", "--tenant", "acme", "--flow", "forward-order", "--id", "9"},
			{"replay", "--tenant", "acme", "--flow", "sync-invoices", "--id", "1"},
		} {
			r := dlqCLI(t, db, args...)
			want := fmt.Sprintf("no pending dead letter id=%s tenant=acme flow=%s\n", args[6], args[4])
			if r.code != 1 || r.stderr != want || r.stdout != "" {
				t.Errorf("dlq %v: exit %d stdout %q stderr %q, want exit 1 and %q", args, r.code, r.stdout, r.stderr, want)
			}
		}
		if d := diffSnapshots(before, snapshot(t, filepath.Dir(db))); len(d) > 0 {
			t.Errorf("the refused commands wrote to the state directory: %v", d)
		}
	})

	t.Run("names that break the rule", func(t *testing.T) {
		before := snapshot(t, filepath.Dir(db))
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"list", "--tenant", "../x"}, `invalid name "../x" for tenant (any flow): character '.' at position 1 is not allowed`},
			{[]string{"replay", "--tenant", "../x", "--flow", "forward-order", "--id", "1"}, `invalid name "../x" for tenant (flow "forward-order"): character '.' at position 1 is not allowed`},
			{[]string{"discard", "--tenant", "A", "--flow", "forward-order", "--id", "1"}, `invalid name "A" for tenant (flow "forward-order"): character 'A' at position 1 is not allowed`},
			{[]string{"list", "--tenant", "A", "--flow", "forward-order"}, `invalid name "A" for tenant (flow "forward-order"): character 'A' at position 1 is not allowed`},
			{[]string{"replay", "--tenant", "acme", "--flow", "a.b", "--id", "1"}, `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
			{[]string{"list", "--tenant", "acme", "--flow", "a.b"}, `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
			{[]string{"discard", "--tenant", "acme", "--flow", "../../x", "--id", "1"}, `invalid name "../../x" for flow (tenant "acme"): character '.' at position 1 is not allowed`},
			// a filter given empty (a shell variable not set) is not "no filter"
			{[]string{"list", "--tenant", ""}, `invalid name "" for tenant (any flow): the name is empty`},
			{[]string{"list", "--tenant", "acme", "--flow="}, `invalid name "" for flow (tenant "acme"): the name is empty`},
			{[]string{"list", "--flow", "a.b"}, `invalid name "a.b" for flow (any tenant): character '.' at position 2 is not allowed`},
			{[]string{"replay", "--tenant", "", "--flow", "forward-order", "--id", "1"}, `invalid name "" for tenant (flow "forward-order"): the name is empty`},
			{[]string{"discard", "--tenant", "acme", "--flow=", "--id", "1"}, `invalid name "" for flow (tenant "acme"): the name is empty`},
		} {
			r := dlqCLI(t, db, c.args...)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if r.code != 1 || !strings.Contains(lines[0], c.want) || r.stdout != "" {
				t.Errorf("dlq %v: exit %d stdout %q, first line %q\nwant exit 1 (flow-file.md: \"the CLI prints it and exits 1\") and %q", c.args, r.code, r.stdout, lines[0], c.want)
			}
		}
		for _, args := range [][]string{
			{"replay", "--tenant", "acme", "--flow", "forward-order"},
			{"discard", "--tenant", "acme", "--id", "1"},
			{"replay", "--tenant", "acme", "--flow", "forward-order", "--id", "abc"},
			{"replay", "--tenant", "acme", "--flow", "forward-order", "--id", "0"},
			{"list", "--id", "1"},
			{"purge"},
		} {
			r := dlqCLI(t, db, args...)
			if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "nexus dlq") {
				t.Errorf("dlq %v: exit %d stdout %q stderr %q, want a usage error (exit 2)", args, r.code, r.stdout, r.stderr)
			}
		}
		if d := diffSnapshots(before, snapshot(t, filepath.Dir(db))); len(d) > 0 {
			t.Errorf("the refused commands created or changed: %v", d)
		}
		if exists(filepath.Join(filepath.Dir(db), "x")) || exists(filepath.Join(filepath.Dir(filepath.Dir(db)), "x")) {
			t.Error("a folder x appeared outside the queues folder")
		}
	})

	t.Run("--db finds this server's queues, the default does not", func(t *testing.T) {
		home := t.TempDir()
		if r := nexusEnv(t, []string{"HOME=" + home}, "dlq", "list"); r.code != 0 || r.stdout != "DLQ is empty\n" {
			t.Errorf("dlq list with the default --db (HOME=%s): exit %d %q %s", home, r.code, r.stdout, r.stderr)
		}
		if r := nexusEnv(t, []string{"HOME=" + home}, "dlq", "list", "--db", db); r.code != 0 || !regexp.MustCompile(pending).MatchString(r.stdout) {
			t.Errorf("dlq list --db %s: exit %d\n%s%s", db, r.code, r.stdout, r.stderr)
		}
		if r := nexusEnv(t, []string{"HOME=" + home, "NEXUS_DB=" + db}, "dlq", "list"); r.code != 0 || !regexp.MustCompile(pending).MatchString(r.stdout) {
			t.Errorf("dlq list with NEXUS_DB=%s: exit %d\n%s%s", db, r.code, r.stdout, r.stderr)
		}
		other := filepath.Join(t.TempDir(), "registry.db")
		if r := nexusEnv(t, []string{"HOME=" + home}, "dlq", "list", "--db", other); r.code != 0 || r.stdout != "DLQ is empty\n" {
			t.Errorf("dlq list --db %s: exit %d %q %s", other, r.code, r.stdout, r.stderr)
		}
		r := nexusEnv(t, []string{"HOME=" + home}, "dlq", "replay", "--tenant", "acme", "--flow", "sync-invoices", "--id", "2")
		if r.code != 1 || r.stderr != "no pending dead letter id=2 tenant=acme flow=sync-invoices\n" {
			t.Errorf("dlq replay with the default --db: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		if exists(filepath.Join(home, ".nexus", "queues", "acme")) {
			t.Errorf("the replay against the default --db created a queue in %s", filepath.Join(home, ".nexus", "queues"))
		}
	})

	t.Run("a replay waits for a worker after a restart", func(t *testing.T) {
		be.setStatus(http.StatusOK)
		h2 := startHost(t, hostOptions{repo: repo.dir, db: db})
		waitGate(t, h2, "acme", "sync-invoices", acmeKey)
		before := len(be.on("/invoices"))
		r := dlqCLI(t, db, "replay", "--tenant", "acme", "--flow", "sync-invoices", "--id", "2")
		if r.code != 0 || r.stdout != "replayed  id=2 tenant=acme flow=sync-invoices\n" {
			t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		time.Sleep(1500 * time.Millisecond) // three poll intervals: no worker runs for sync-invoices yet
		if evs := h2.events("queue_processed"); len(evs)+len(h2.events("dlq_moved")) != 0 || len(be.on("/invoices")) != before {
			t.Errorf("a replayed message ran before anything was submitted to the flow: %v", evs)
		}
		// the replayed invoice still fails its check; a valid one wakes the worker
		id := mustEnqueue(t, h2, "acme", "sync-invoices", acmeKey, `{"invoiceId":"INV-3","total":5}`)
		if id != 4 {
			t.Errorf("X-Nexus-Message-Id %d, want 4 (1 and 2 dead-lettered, 3 the replay)", id)
		}
		ev := waitEvents(t, h2, "queue_retry_scheduled", 1, nil, 5*time.Second)[0]
		if fmt.Sprint(ev["msg_id"]) != "3" {
			t.Errorf("the backlog first: the replay (id 3) is delivered before the wake-up submission: %v", ev)
		}
		waitEvents(t, h2, "queue_processed", 1, field("msg_id", 4), 5*time.Second)
		waitEvents(t, h2, "dlq_moved", 1, field("msg_id", 3), 5*time.Second)
		if r := dlqCLI(t, db, "list"); !regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(3, "sync-invoices", 3, invoiceError) + `$`).MatchString(r.stdout) {
			t.Errorf("dlq list: the unchanged replay goes straight back, as message 3:\n%s", r.stdout)
		}
	})
}

func TestDLQCorruptArtifact(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"access.yaml":                 accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	})
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	if r := nexus(t, "", "deploy", "--db", db, dir); r.code != 0 || r.stdout != "published acme/forward-order v1\npublished access keys of "+filepath.Join(dir, "access.yaml")+" (1 key)\n" {
		t.Fatalf("deploy: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	// one byte of the stored artifact flipped, with no server running
	corruptArtifact(t, db, "acme", "forward-order")

	h := startHost(t, hostOptions{db: db})
	waitGate(t, h, "acme", "forward-order", acmeKey)
	if r := h.run("acme", "forward-order", acmeKey, `{"orderId":"A-1"}`); r.status != 500 || r.body != `{"ok":false,"error":"internal error"}` {
		t.Errorf("/run of the corrupt artifact: %d %s", r.status, r.body)
	}
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`, "X-Correlation-ID", "trace-corrupt")
	moved := waitEvents(t, h, "dlq_moved", 1, nil, 5*time.Second)[0]
	if moved["correlation_id"] != "trace-corrupt" || fmt.Sprint(moved["attempt"]) != "1" {
		t.Errorf("dlq_moved: %v", moved)
	}
	// both lines say what every line of an execution says: the /run's
	// had no outcome and no duration, the dead letter's no version or status
	const corruptText = "artifact acme/forward-order v1 failed its integrity check"
	ran := waitEvents(t, h, "run_completed", 1, nil, 5*time.Second)[0]
	for _, ev := range []map[string]any{ran, moved} {
		_, timed := ev["duration_ms"]
		if fmt.Sprint(ev["version"]) != "1" || fmt.Sprint(ev["status"]) != "500" || !timed {
			t.Errorf("%s: %v; want version 1, status 500 and duration_ms", ev["event"], ev)
		}
	}
	if ran["outcome"] != "failed" || ran["error"] != corruptText {
		t.Errorf("run_completed: %v; want outcome failed and the error %q", ran, corruptText)
	}
	if evs := h.events("queue_retry_scheduled"); len(evs) != 0 {
		t.Errorf("a corrupt artifact was retried: %v", evs)
	}
	r := dlqCLI(t, db, "list")
	want := `^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(1, "forward-order", 1, "artifact acme/forward-order v1 failed its integrity check") + `$`
	if r.code != 0 || !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Errorf("dlq list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := len(be.received()); n != 0 {
		t.Errorf("%d calls to the backend from a corrupt artifact", n)
	}
	// both deliveries are in the journal (server.md: it "records every
	// execution"), though neither ran: they were missing from it
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); len(lines) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r := nexus(t, "", "journal", "--db", db)
		lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.stdout == "the journal is empty\n" {
			lines = nil
		}
	}
	const errText = `error="artifact acme/forward-order v1 failed its integrity check"`
	if len(lines) != 2 || !strings.Contains(lines[0], " enqueue acme/forward-order v1 failed 500 ") || !strings.Contains(lines[0], "correlation_id=trace-corrupt msg_id=1 "+errText) ||
		!strings.Contains(lines[1], " run     acme/forward-order v1 failed 500 ") || !strings.HasSuffix(lines[1], errText) {
		t.Errorf("nexus journal:\n%s\nwant the enqueue and the run of the corrupt artifact, failed 500", strings.Join(lines, "\n"))
	}
}

// TestQueuePublishToACorruptArtifact: a queue_publish step whose target
// flow is deployed but whose artifact fails its integrity check fails
// before anything is written, "effect handler failed: …" (502), as for a
// target that is not live (flow-file.md, Precise answers): the message is
// not appended to a queue whose every delivery is dead-lettered unrun.
func TestQueuePublishToACorruptArtifact(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"access.yaml":                    accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/order-handoff.md":    queueExample(t, "order-handoff", be.URL),
		"flows/acme/order-fulfilment.md": queueExample(t, "order-fulfilment", be.URL),
	})
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	if r := nexus(t, "", "deploy", "--db", db, dir); r.code != 0 {
		t.Fatalf("deploy: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	corruptArtifact(t, db, "acme", "order-fulfilment")

	h := startHost(t, hostOptions{db: db})
	waitGate(t, h, "acme", "order-handoff", acmeKey)
	r := h.do(http.MethodPost, "/flows/acme/order-handoff/run", acmeKey, "application/json", `{"orderId":"A-1"}`, "X-Correlation-ID", "trace-corrupt-target")
	if r.status != 502 || r.body != `{"ok":false,"error":"flow execution failed"}` {
		t.Errorf("/run of the publisher: %d %s, want 502", r.status, r.body)
	}
	ev := waitEvents(t, h, "run_completed", 1, field("correlation_id", "trace-corrupt-target"), 5*time.Second)[0]
	if want := "step 'hand-off': effect handler failed: flow acme/order-fulfilment is not live: its artifact failed its integrity check"; ev["error"] != want {
		t.Errorf("run_completed: %v, want the error %q", ev, want)
	}
	if q := filepath.Join(queuesRoot(db), "acme", "order-fulfilment"); exists(q) {
		t.Errorf("the refused publication created %s", q)
	}
	if evs := h.events("queue_enqueued"); len(evs) != 0 {
		t.Errorf("queue_enqueued: %v, want none", evs)
	}
}

// TestDLQAll: after a downstream outage, --all replays (or discards) every
// pending dead letter of one queue, oldest first, one line each as for
// one id; a running worker delivers the replays. --all beside --id is bad
// usage, and a queue with none pending says so and exits 0.
func TestDLQAll(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := oneAttemptHost(t, be)
	for i := 1; i <= 3; i++ {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"A-%d"}`, i), "X-Correlation-ID", fmt.Sprintf("trace-all-%d", i))
	}
	waitEvents(t, h, "dlq_moved", 3, nil, 10*time.Second)
	// what happened to one of them, found by its correlation ID
	var out string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out, "correlation_id=trace-all-2") && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out = nexus(t, "", "journal", "--db", h.db, "--correlation-id", "trace-all-2").stdout
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], " enqueue acme/forward-order v1 failed 502 ") || !strings.Contains(lines[0], "correlation_id=trace-all-2 msg_id=2 ") {
		t.Errorf("nexus journal --correlation-id trace-all-2:\n%s\nwant its one failed attempt", out)
	}

	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1", "--all"); r.code != 2 ||
		!strings.HasPrefix(r.stderr, "nexus dlq replay: replay takes --id or --all, not both\n") {
		t.Errorf("--id beside --all: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "hello", "--all"); r.code != 0 || r.stdout != "no pending dead letter tenant=acme flow=hello\n" {
		t.Errorf("--all on a queue with none: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}

	be.setStatus(http.StatusOK)
	r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--all")
	if want := "replayed  id=1 tenant=acme flow=forward-order\nreplayed  id=2 tenant=acme flow=forward-order\nreplayed  id=3 tenant=acme flow=forward-order\n"; r.code != 0 || r.stdout != want {
		t.Errorf("replay --all: exit %d\n%s%s\nwant\n%s", r.code, r.stdout, r.stderr, want)
	}
	if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list after replay --all:\n%s", r.stdout)
	}
	waitEvents(t, h, "queue_processed", 3, nil, 10*time.Second)
	var got []string
	for _, x := range be.on("/ingest") {
		got = append(got, x.body)
	}
	// each refused once (queue_max_attempts: 1), then replayed in order
	if want := []string{`{"orderId":"A-1"}`, `{"orderId":"A-2"}`, `{"orderId":"A-3"}`}; len(got) != 6 || !slices.Equal(got[3:], want) {
		t.Errorf("the backend received %v, want the three messages, then their replays in order", got)
	}

	be.setStatus(http.StatusServiceUnavailable)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"B-1"}`)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"B-2"}`)
	waitEvents(t, h, "dlq_moved", 5, nil, 10*time.Second)
	r = dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "forward-order", "--all")
	if want := "discarded id=7 tenant=acme flow=forward-order\ndiscarded id=8 tenant=acme flow=forward-order\n  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings\n"; r.code != 0 || r.stdout != want {
		t.Errorf("discard --all: exit %d\n%s%s\nwant\n%s", r.code, r.stdout, r.stderr, want)
	}
	if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list after discard --all:\n%s", r.stdout)
	}
}

// A dead letter's replay runs the flow again under dedup_on_failure:
// absorb, though the key holds the failure that dead-lettered it: through
// nexus dlq replay and through the management API. A duplicate submitted
// at the door still receives the recorded failure without a call.
func TestDLQReplayUnderAbsorb(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL, "queue_max_attempts: 5",
			"queue_max_attempts: 1\ndedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb"),
	}, hostOptions{}, "forward-order")
	calls := func() int { return len(be.on("/ingest")) }

	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	waitEvents(t, h, "dlq_moved", 1, nil, 10*time.Second)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	if ev := waitEvents(t, h, "queue_processed", 1, nil, 10*time.Second)[0]; ev["outcome"] != "failed" || ev["replay"] != true || calls() != 1 {
		t.Fatalf("a duplicate at the door: %v after %d calls, want the recorded failure (replay) and no call", ev, calls())
	}

	be.setStatus(http.StatusOK)
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1"); r.code != 0 {
		t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	got := be.waitOn(t, "/ingest", 2, 10*time.Second)
	if got[1].body != `{"orderId":"A-1"}` {
		t.Errorf("the replay's call: %s", got[1].body)
	}
	if ev := waitEvents(t, h, "queue_processed", 2, nil, 10*time.Second)[1]; ev["outcome"] != "succeeded" || ev["replay"] == true {
		t.Errorf("the replay's delivery: %v, want it run and succeeded", ev)
	}

	be.setStatus(http.StatusServiceUnavailable)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"B-1"}`)
	waitEvents(t, h, "dlq_moved", 2, nil, 10*time.Second)
	be.setStatus(http.StatusOK)
	if r := h.do(http.MethodPost, "/api/queues/acme/forward-order/dlq/all/replay", h.adminKey, "", ""); r.status != http.StatusOK {
		t.Fatalf("replay all through the API: %d %s", r.status, r.body)
	}
	if got := be.waitOn(t, "/ingest", 4, 10*time.Second); got[3].body != `{"orderId":"B-1"}` {
		t.Errorf("the API replay's call: %s", got[3].body)
	}
	if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list after the replays:\n%s", r.stdout)
	}
}

// corruptArtifact appends a byte to the stored artifact of version 1 of
// tenant/flow in the registry at db, with no server running: it fails its
// integrity check when loaded.
func corruptArtifact(t *testing.T, db, tenant, flow string) {
	t.Helper()
	sqlDB, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	res, err := sqlDB.Exec(`UPDATE flow_versions SET artifact = CAST(artifact AS BLOB) || x'00' WHERE tenant = ? AND flow = ? AND version = 1`, tenant, flow)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d artifacts of %s/%s changed", n, tenant, flow)
	}
}
