package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Cron flows end to end: a tick appends schedule_input to the flow's own
// queue with door cron, so the queue's retries and dead-letter queue apply;
// schedules follow commits at the swap; one process ticks per flow when
// several share a state directory.

// cronFlow ticks on SCHEDULE and posts what it saw to BACKEND/tick.
const cronFlow = `---
flowmarkdown_version: "0.1"
flow: NAME
tenant: acme
effects: [http_egress]
schedule: "SCHEDULE"
schedule_input: {"job": "NAME"}
EXTRA---

## Step: stamp
` + "```ntd" + `
{"job": "{{ $.job }}", "door": "{{ ctx.door }}", "attempt": {{ ctx.attempt }}, "correlationId": "{{ ctx.correlation_id }}"}
` + "```" + `

## Step: push
effects: [http_egress]
endpoint: BACKEND/tick
method: POST
`

func cronFlowFor(name, schedule, backendURL, extra string) string {
	return strings.NewReplacer("NAME", name, "SCHEDULE", schedule, "BACKEND", backendURL, "EXTRA", extra).Replace(cronFlow)
}

// tickBody is what cronFlow posts.
type tickBody struct {
	Job, Door, CorrelationID string
	Attempt                  int
}

func decodeTick(t *testing.T, x hit) tickBody {
	t.Helper()
	var b tickBody
	if err := json.Unmarshal([]byte(x.body), &b); err != nil {
		t.Fatalf("tick body %q: %v", x.body, err)
	}
	return b
}

// ticksSince returns the requests on /tick that arrived after since.
func ticksSince(be *loopback, since time.Time) []hit {
	var out []hit
	for _, x := range be.on("/tick") {
		if x.at.After(since) {
			out = append(out, x)
		}
	}
	return out
}

// statusSchedules is the schedules list of GET /status.
func statusSchedules(t *testing.T, h *hostProc) []map[string]any {
	t.Helper()
	r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
	var st struct {
		Schedules []map[string]any `json:"schedules"`
	}
	if r.status != 200 || json.Unmarshal([]byte(r.body), &st) != nil {
		t.Fatalf("/status: %d %s", r.status, r.body)
	}
	return st.Schedules
}

func TestCronTicksFollowCommits(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, repo := queueHost(t, map[string]string{
		"flows/acme/heartbeat.md": cronFlowFor("heartbeat", "@every 1s", be.URL, ""),
		"flows/acme/hello.md":     helloFlow, // the flows folder outlives the cron flow
	}, hostOptions{})
	live := time.Now()

	t.Run("@every 1s ticks with door cron", func(t *testing.T) {
		ticks := be.waitOn(t, "/tick", 2, 4*time.Second)
		seen := map[string]bool{}
		for _, x := range ticks {
			b := decodeTick(t, x)
			if b.Door != "cron" || b.Job != "heartbeat" || b.Attempt != 1 {
				t.Errorf("tick %s, want door cron, the schedule_input and attempt 1", x.body)
			}
			if b.CorrelationID == "" || b.CorrelationID != x.header.Get("X-Correlation-Id") || seen[b.CorrelationID] {
				t.Errorf("tick with correlation ID %q (header %q): each tick is its own trace", b.CorrelationID, x.header.Get("X-Correlation-Id"))
			}
			seen[b.CorrelationID] = true
		}
		if gap := ticks[1].at.Sub(ticks[0].at); gap < 800*time.Millisecond || gap > 1500*time.Millisecond {
			t.Errorf("ticks %v apart, want about 1 s", gap)
		}
		t.Logf("first tick %v after the commit was live", ticks[0].at.Sub(live).Round(time.Millisecond))
		ev := waitEvents(t, h, "cron_tick", 2, nil, time.Second)
		if ev[0]["tenant"] != "acme" || ev[0]["flow"] != "heartbeat" || ev[0]["correlation_id"] == nil || ev[0]["msg_id"] == nil {
			t.Errorf("cron_tick: %v", ev[0])
		}
		var out string
		eventually(t, 10*time.Second, "journal rows of door cron", func() bool {
			out = nexus(t, "", "journal", "--db", h.db, "--flow", "heartbeat").stdout
			return regexp.MustCompile(`(?m)^\S+ cron +acme/heartbeat v1 succeeded 200 \d+ms attempt=1 correlation_id=\S+ msg_id=\d+$`).MatchString(out)
		})
	})

	t.Run("the schedule in /status and nexus status", func(t *testing.T) {
		sc := statusSchedules(t, h)
		if len(sc) != 1 || sc[0]["tenant"] != "acme" || sc[0]["flow"] != "heartbeat" || sc[0]["schedule"] != "@every 1s" {
			t.Fatalf("/status schedules: %v", sc)
		}
		next, err := time.Parse(time.RFC3339, fmt.Sprint(sc[0]["next"]))
		if err != nil || next.Before(time.Now().Add(-time.Second)) || next.After(time.Now().Add(2*time.Second)) {
			t.Errorf("/status next tick %v (%v), want within the next second or two", sc[0]["next"], err)
		}
		r := nexus(t, "", "status", "--db", h.db)
		if r.code != 0 || !regexp.MustCompile(`(?m)^schedule: acme/heartbeat "@every 1s" .*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(r.stdout) {
			t.Errorf("nexus status --db: exit %d\n%s%s\nwant a schedule: line naming the flow, its schedule and its next tick", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a commit changing the schedule is followed at the swap", func(t *testing.T) {
		c := repo.commit(map[string]string{"flows/acme/heartbeat.md": cronFlowFor("heartbeat", "@every 2s", be.URL, "")})
		waitCommitT(t, h, c, 10*time.Second)
		swapped := time.Now()
		ticks := func() []hit { return ticksSince(be, swapped) }
		eventually(t, 12*time.Second, "four ticks after the commit", func() bool { return len(ticks()) >= 4 })
		got := ticks()
		var gaps []string
		for i := 1; i < len(got); i++ {
			gaps = append(gaps, got[i].at.Sub(got[i-1].at).Round(time.Millisecond).String())
		}
		t.Logf("first tick %v after the commit was live, then gaps %v", got[0].at.Sub(swapped).Round(time.Millisecond), gaps)
		// the first may be one of the old schedule, made before the
		// scheduler saw the swap; from then on they are 2 s apart
		for i := 2; i < len(got); i++ {
			if gap := got[i].at.Sub(got[i-1].at); gap < 1800*time.Millisecond || gap > 2600*time.Millisecond {
				t.Errorf("ticks %d and %d after the commit are %v apart, want about 2 s", i, i+1, gap)
			}
		}
		if sc := statusSchedules(t, h); len(sc) != 1 || sc[0]["schedule"] != "@every 2s" {
			t.Errorf("/status schedules after the commit: %v", sc)
		}
	})

	t.Run("removing the flow stops the ticks", func(t *testing.T) {
		c := repo.commit(map[string]string{"flows/acme/heartbeat.md": ""})
		waitCommitT(t, h, c, 10*time.Second)
		time.Sleep(1500 * time.Millisecond) // the scheduler's next look at the live set, and a tick already queued
		settled := time.Now()
		time.Sleep(3 * time.Second)
		if late := ticksSince(be, settled); len(late) != 0 {
			t.Errorf("%d ticks after the flow was removed", len(late))
		}
		if sc := statusSchedules(t, h); len(sc) != 0 {
			t.Errorf("/status schedules after the removal: %v", sc)
		}
		if r := nexus(t, "", "status", "--db", h.db); strings.Contains(r.stdout, "schedule:") {
			t.Errorf("nexus status after the removal:\n%s", r.stdout)
		}
	})
}

func TestCronFailingTickDeadLetters(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/cron-fail.md": cronFlowFor("cron-fail", "@every 1s", be.URL, "queue_max_attempts: 2\nqueue_initial_delay_ms: 200\n"),
	}, hostOptions{})

	moved := waitEvents(t, h, "dlq_moved", 1, nil, 6*time.Second)[0]
	if fmt.Sprint(moved["msg_id"]) != "1" || moved["flow"] != "cron-fail" || moved["correlation_id"] == nil {
		t.Errorf("dlq_moved: %v", moved)
	}
	retry := waitEvents(t, h, "queue_retry_scheduled", 1, nil, time.Second)[0]
	if fmt.Sprint(retry["msg_id"]) != "1" || fmt.Sprint(retry["delay_ms"]) != "200" || retry["correlation_id"] != moved["correlation_id"] {
		t.Errorf("queue_retry_scheduled: %v", retry)
	}
	var first []tickBody
	var firstHits []hit
	for _, x := range be.on("/tick") {
		if b := decodeTick(t, x); b.CorrelationID == moved["correlation_id"] {
			first, firstHits = append(first, b), append(firstHits, x)
		}
	}
	if len(first) != 2 || first[0].Attempt != 1 || first[1].Attempt != 2 || first[0].Door != "cron" || first[1].Door != "cron" {
		t.Errorf("the first tick's attempts: %+v, want attempts 1 and 2, door cron, one correlation ID", first)
	} else if gap := firstHits[1].at.Sub(firstHits[0].at); gap < 150*time.Millisecond || gap > 1500*time.Millisecond {
		t.Errorf("the retry came %v after the first attempt, want 200 ms", gap)
	}
	r := dlqCLI(t, h.db, "list", "--tenant", "acme", "--flow", "cron-fail")
	entry := `^DLQ: \d+ pending message\(s\)\n` + dlqEntryRE(1, "cron-fail", 2, "step 'push': effect handler failed: HTTP 503 Service Unavailable")
	if r.code != 0 || !regexp.MustCompile(entry).MatchString(r.stdout) {
		t.Errorf("dlq list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out string
	eventually(t, 10*time.Second, "the journal rows of the failed tick", func() bool {
		out = nexus(t, "", "journal", "--db", h.db, "--flow", "cron-fail", "--limit", "100").stdout
		return strings.Contains(out, "attempt=2")
	})
	if !regexp.MustCompile(`(?m)^\S+ cron +acme/cron-fail v1 failed 502 \d+ms attempt=2 correlation_id=\S+ msg_id=1 error=`).MatchString(out) {
		t.Errorf("journal:\n%s\nwant a row of door cron, attempt 2, msg_id 1", out)
	}
}

// twoCronProcesses starts two hosts on one state directory serving a flow
// that ticks every second to a loopback backend, and waits until both have
// the schedule and the first tick has arrived.
func twoCronProcesses(t *testing.T) (be *loopback, h1, h2 *hostProc) {
	t.Helper()
	be = newLoopback(t)
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/heartbeat.md": cronFlowFor("heartbeat", "@every 1s", be.URL, ""),
	}, hostOptions{})
	h2 = startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	h2.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	eventually(t, 5*time.Second, "the schedule live in both processes", func() bool {
		return len(statusSchedules(t, h1)) == 1 && len(statusSchedules(t, h2)) == 1
	})
	be.waitOn(t, "/tick", 1, 4*time.Second)
	return be, h1, h2
}

func TestCronTwoProcessesOneTick(t *testing.T) {
	t.Parallel()
	be, h1, h2 := twoCronProcesses(t)

	from := time.Now()
	time.Sleep(5 * time.Second)
	n := len(ticksSince(be, from))
	if n < 4 || n > 6 {
		t.Errorf("%d ticks in 5 s with two processes on one state directory, want about 5 (one per period)", n)
	}
	t1, t2 := len(h1.events("cron_tick")), len(h2.events("cron_tick"))
	if t1 > 0 && t2 > 0 {
		t.Errorf("both processes ticked: %d and %d cron_tick events", t1, t2)
	}
	t.Logf("%d ticks in 5 s; cron_tick events %d and %d", n, t1, t2)

	// the other takes over when the ticking process dies, without a double tick
	holder, other := h1, h2
	if t2 > 0 {
		holder, other = h2, h1
	}
	holder.kill()
	killed := time.Now()
	ticked := waitEvents(t, other, "cron_tick", 2, nil, 6*time.Second)
	// the survivor's own ticks: a tick the holder queued just before the
	// kill is delivered by the survivor's worker once it starts, next to
	// the survivor's first tick (at least once, not a double tick)
	mine := map[string]bool{}
	for _, ev := range ticked {
		mine[fmt.Sprint(ev["correlation_id"])] = true
	}
	var after []hit
	eventually(t, 5*time.Second, "the survivor's ticks at the backend", func() bool {
		after = after[:0]
		for _, x := range ticksSince(be, killed) {
			if mine[decodeTick(t, x).CorrelationID] {
				after = append(after, x)
			}
		}
		return len(after) >= len(mine)
	})
	var gaps []string
	for i := 1; i < len(after); i++ {
		gap := after[i].at.Sub(after[i-1].at)
		gaps = append(gaps, gap.Round(time.Millisecond).String())
		if gap < 500*time.Millisecond {
			t.Errorf("two ticks %v apart after the takeover", gap)
		}
	}
	t.Logf("after the kill: first tick %v later, then gaps %v", after[0].at.Sub(killed).Round(time.Millisecond), gaps)
}

func TestCronMissedTicksNotReplayed(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, repo := queueHost(t, map[string]string{
		"flows/acme/heartbeat.md": cronFlowFor("heartbeat", "@every 1s", be.URL, ""),
	}, hostOptions{})
	be.waitOn(t, "/tick", 2, 5*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	stopped := time.Now()
	time.Sleep(3500 * time.Millisecond) // three ticks missed
	if n := len(ticksSince(be, stopped)); n != 0 {
		t.Errorf("%d ticks while the host was down", n)
	}
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	restarted := time.Now()
	waitEvents(t, h2, "cron_tick", 3, nil, 6*time.Second)
	elapsed := time.Since(restarted)

	// every tick made after the restart is for a time after it: none of
	// the downtime's is made up
	ticks := h2.events("cron_tick")
	for _, e := range ticks {
		at, err := time.Parse(time.RFC3339, fmt.Sprint(e["scheduled_for"]))
		if err != nil || at.Before(restarted.Truncate(time.Second)) {
			t.Errorf("a tick after the restart scheduled for %v, before the restart at %s (%v)", e["scheduled_for"], restarted.UTC().Format(time.RFC3339Nano), err)
		}
	}
	if n := len(ticks); n > 1+int(elapsed/time.Second) {
		t.Errorf("%d ticks in the %v after the restart", n, elapsed.Round(time.Millisecond))
	}
	// what reaches the backend after the restart is those ticks, and at
	// most a tick made before the stop and still queued
	before := map[string]bool{}
	for _, e := range h.events("cron_tick") {
		before[fmt.Sprint(e["correlation_id"])] = true
	}
	after := map[string]bool{}
	for _, e := range ticks {
		after[fmt.Sprint(e["correlation_id"])] = true
	}
	for _, x := range ticksSince(be, restarted) {
		cid := x.header.Get("X-Correlation-Id")
		if !after[cid] && !before[cid] {
			t.Errorf("a delivery after the restart with correlation ID %q, of no tick", cid)
		}
		if b := decodeTick(t, x); b.Door != "cron" {
			t.Errorf("a tick after the restart: %+v", b)
		}
	}
}

func TestCronStatusPrintsUTC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"access.yaml":                      accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/open-orders-report.md": queueExample(t, "open-orders-report", "http://127.0.0.1:9"),
	})
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	if r := nexus(t, "", "deploy", "--db", db, dir); r.code != 0 {
		t.Fatalf("deploy: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	r := nexus(t, "", "status", "--db", db)
	line := regexp.MustCompile(`(?m)^schedule: acme/open-orders-report .*$`).FindString(r.stdout)
	if r.code != 0 || line == "" || !strings.Contains(line, `"0 6 * * 1-5"`) || !strings.Contains(line, "Europe/Berlin") {
		t.Fatalf("nexus status: exit %d\n%s%s\nwant a schedule: line with the expression and its zone", r.code, r.stdout, r.stderr)
	}
	// The next tick is printed in UTC with whole seconds, as every time the CLI prints
	// (server.md, "Precise answers"), and no time in another form.
	for _, tm := range regexp.MustCompile(`\d{4}-\d\d-\d\dT\S+`).FindAllString(r.stdout, -1) {
		if !regexp.MustCompile(`^` + rfc3339 + `$`).MatchString(tm) {
			t.Errorf("nexus status prints the time %s, want RFC 3339 UTC with whole seconds:\n%s", tm, r.stdout)
		}
	}
	m := regexp.MustCompile(`next (\S+)$`).FindStringSubmatch(line)
	if m == nil || !regexp.MustCompile(`^`+rfc3339+`$`).MatchString(m[1]) {
		t.Errorf("%q: the next tick is not printed as RFC 3339 UTC with whole seconds (2026-08-09T14:02:11Z)", line)
	} else if next, _ := time.Parse(time.RFC3339, m[1]); next.In(mustZone(t, "Europe/Berlin")).Hour() != 6 || next.Before(time.Now()) {
		t.Errorf("%q: want the next 06:00 Europe/Berlin on a weekday", line)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
