package integration

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What /metrics says, held to what happened: the doors' traffic, the
// queue's deliveries, retries and dead letters, nexus dlq replay and
// discard run by another process, a restart with a backlog and a flow
// withdrawn from git, each read from a real server's /metrics with
// Prometheus' own text parser.

// nexusSeries scrapes h's /metrics and returns every sample of a nexus_
// metric, keyed name{label="value",…} (labels sorted); a histogram gives
// its _count.
func nexusSeries(t *testing.T, h *hostProc) map[string]float64 {
	t.Helper()
	r := h.do(http.MethodGet, "/metrics", "", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %.200s", r.status, r.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "nexus_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key, v := name, 0.0
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				key, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			default:
				continue
			}
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			sort.Strings(labels)
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			out[key] = v
		}
	}
	return out
}

// pick returns the samples of series whose key starts with one of the
// prefixes; counters (prefixes in delta) less their value in before.
func pick(series, before map[string]float64, prefixes ...string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range series {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				out[k] = v - before[k]
				if out[k] == 0 && before != nil {
					delete(out, k)
				}
			}
		}
	}
	return out
}

// queueLabelsRE finds the flow and tenant labels of a key of nexusSeries
// (its labels are sorted: flow, outcome, tenant).
var queueLabelsRE = regexp.MustCompile(`flow="([^"]*)".*tenant="([^"]*)"`)

// queueLabels are the tenant/flow pairs labelling series.
func queueLabels(series map[string]float64) []string {
	set := map[string]bool{}
	for k := range series {
		if m := queueLabelsRE.FindStringSubmatch(k); m != nil {
			set[m[2]+"/"+m[1]] = true
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMetricsTellTheTruth(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	hold := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	})
	be.setAnswer(func(x hit) int {
		switch {
		case strings.Contains(x.body, "HOLD"):
			<-hold
			return http.StatusOK
		case strings.Contains(x.body, "DOWN"):
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	echo := "---\nflowmarkdown_version: \"0.1\"\nflow: echo\ntenant: acme\n---\n\n## Step: echo\n```ntd\n{{ $ }}\n```\n"
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL,
			"queue_max_attempts: 5", "queue_max_attempts: 2", "queue_initial_delay_ms: 500", "queue_initial_delay_ms: 100"),
		"flows/acme/echo.md": echo,
	}, hostOptions{}, "forward-order", "echo")
	fo := `{flow="forward-order",tenant="acme"}`
	gauges := []string{"nexus_queue_depth", "nexus_queue_in_flight", "nexus_queue_retries_pending", "nexus_queue_dead_letters", "nexus_queue_workers"}

	// a burst at both doors: answers, flow failures, refusals of the
	// gate, and names made up by the caller
	before := nexusSeries(t, h)
	answered := map[string]float64{}
	count := func(door string, r response) {
		answered[fmt.Sprintf(`nexus_requests_total{door=%q,status="%d"}`, door, r.status)]++
	}
	for i := range 3 {
		count("run", h.run("acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"OK-R%d"}`, i)))
		count("enqueue", h.enqueue("acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"OK-Q%d"}`, i)))
	}
	for i := range 2 {
		count("run", h.run("acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"DOWN-R%d"}`, i)))
	}
	count("enqueue", h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"DOWN-Q1"}`))
	count("run", h.run("acme", "forward-order", "", `{}`))
	count("enqueue", h.enqueue("acme", "forward-order", "wrong-key", `{}`))
	for i := range 20 {
		count("run", h.run("acme", fmt.Sprintf("made-up-%d", i), acmeKey, `{}`))
		count("enqueue", h.enqueue("acme", fmt.Sprintf("made-up-%d", i), acmeKey, `{}`))
		count("enqueue", h.enqueue(fmt.Sprintf("tenant-%d", i), "forward-order", acmeKey, `{}`))
		count("enqueue", h.enqueue("acme", fmt.Sprintf("Bad.Name-%d", i), acmeKey, `{}`))
	}
	for _, k := range []string{`nexus_requests_total{door="run",status="200"}`, `nexus_requests_total{door="run",status="502"}`,
		`nexus_requests_total{door="run",status="401"}`, `nexus_requests_total{door="enqueue",status="202"}`} {
		if answered[k] == 0 {
			t.Fatalf("the burst had no answer %s: %v", k, answered)
		}
	}
	waitEvents(t, h, "dlq_moved", 1, nil, 10*time.Second)
	waitEvents(t, h, "queue_processed", 3, nil, 10*time.Second)
	after := nexusSeries(t, h)
	if diff := cmp.Diff(answered, pick(after, before, "nexus_requests_total")); diff != "" {
		t.Errorf("nexus_requests_total after the burst, less before (-answers seen +metrics):\n%s", diff)
	}
	want := map[string]float64{
		// the executions: refusals run no flow; a queued message's every attempt does
		`nexus_execution_duration_seconds_count{door="run"}`:                                      5,
		`nexus_execution_duration_seconds_count{door="enqueue"}`:                                  3 + 2,
		`nexus_queue_delivered_total{flow="forward-order",outcome="succeeded",tenant="acme"}`:     3,
		`nexus_queue_delivered_total{flow="forward-order",outcome="dead_lettered",tenant="acme"}`: 1,
	}
	if diff := cmp.Diff(want, pick(after, before, "nexus_execution_duration_seconds_count", "nexus_queue_delivered_total")); diff != "" {
		t.Errorf("counters after the burst, less before (-want +got):\n%s", diff)
	}
	wantGauges := func(when string, series map[string]float64, depth, dead, workers float64) {
		t.Helper()
		want := map[string]float64{"nexus_queue_depth" + fo: depth, "nexus_queue_in_flight" + fo: 0,
			"nexus_queue_retries_pending" + fo: 0, "nexus_queue_dead_letters" + fo: dead, "nexus_queue_workers": workers}
		if diff := cmp.Diff(want, pick(series, nil, gauges...)); diff != "" {
			t.Errorf("queue gauges %s (-want +got):\n%s", when, diff)
		}
	}
	wantGauges("after the burst", after, 0, 1, 1)
	if got := queueLabels(after); !cmp.Equal(got, []string{"acme/forward-order"}) {
		t.Errorf("queue series after names made up by callers: %v, want acme/forward-order alone", got)
	}

	// nexus dlq replay, then discard, in another process while the server runs
	dead := waitEvents(t, h, "dlq_moved", 1, nil, time.Second)[0]
	id := fmt.Sprint(dead["msg_id"])
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "HOLD") {
			<-hold
		}
		return http.StatusOK
	})
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", id); r.code != 0 {
		t.Fatalf("dlq replay: %d %s%s", r.code, r.stdout, r.stderr)
	}
	waitEvents(t, h, "queue_processed", 4, nil, 10*time.Second)
	var series map[string]float64
	eventually(t, 5*time.Second, "nexus_queue_dead_letters 0 after the replay", func() bool {
		series = nexusSeries(t, h)
		return series["nexus_queue_dead_letters"+fo] == 0
	})
	wantGauges("after nexus dlq replay", series, 0, 0, 1)
	if got := series[`nexus_queue_delivered_total{flow="forward-order",outcome="succeeded",tenant="acme"}`]; got != 4 {
		t.Errorf("delivered succeeded after the replay delivered: %v, want 4", got)
	}
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "HOLD") {
			<-hold
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"DOWN-Q2"}`)
	dead = waitEvents(t, h, "dlq_moved", 2, nil, 10*time.Second)[1]
	eventually(t, 5*time.Second, "nexus_queue_dead_letters 1", func() bool {
		return nexusSeries(t, h)["nexus_queue_dead_letters"+fo] == 1
	})
	before = nexusSeries(t, h)
	if r := dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "forward-order", "--id", fmt.Sprint(dead["msg_id"])); r.code != 0 {
		t.Fatalf("dlq discard: %d %s%s", r.code, r.stdout, r.stderr)
	}
	series = nexusSeries(t, h)
	wantGauges("after nexus dlq discard", series, 0, 0, 1)
	if diff := cmp.Diff(map[string]float64{}, pick(series, before, "nexus_queue_delivered_total", "nexus_execution_duration_seconds_count")); diff != "" {
		t.Errorf("a discard moved counters (-want +got):\n%s", diff)
	}

	// a restart with a backlog and a dead letter: the gauges as on disk,
	// the counters from 0; a replay by another process before any worker
	// started shows at the next scrape
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"DOWN-Q3"}`)
	dead = waitEvents(t, h, "dlq_moved", 3, nil, 10*time.Second)[2]
	for i := range 3 {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"HOLD-%d"}`, i))
	}
	be.waitBody(t, "/ingest", `{"orderId":"HOLD-0"}`, 10*time.Second)
	eventually(t, 5*time.Second, "nexus_queue_in_flight 1 while HOLD-0 is delivered", func() bool {
		series = nexusSeries(t, h)
		return series["nexus_queue_in_flight"+fo] == 1
	})
	if got := series["nexus_queue_depth"+fo]; got != 3 {
		t.Errorf("nexus_queue_depth with one message in flight and two behind it: %v, want 3 (the one in flight included)", got)
	}
	h.kill()
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	h2.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	series = nexusSeries(t, h2)
	wantGauges("after a restart with 3 messages waiting", series, 3, 1, 0)
	if diff := cmp.Diff(map[string]float64{}, pick(series, nil, "nexus_requests_total", "nexus_execution_duration_seconds_count", "nexus_queue_delivered_total")); diff != "" {
		t.Errorf("counters after a restart (-want +got):\n%s", diff)
	}
	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", fmt.Sprint(dead["msg_id"])); r.code != 0 {
		t.Fatalf("dlq replay: %d %s%s", r.code, r.stdout, r.stderr)
	}
	wantGauges("after nexus dlq replay with no worker started", nexusSeries(t, h2), 4, 0, 0)
	be.setAnswer(func(hit) int { return http.StatusOK })
	close(hold)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"OK-AFTER"}`) // starts the worker
	waitEvents(t, h2, "queue_processed", 5, nil, 10*time.Second)
	eventually(t, 5*time.Second, "nexus_queue_depth 0 after the backlog ran", func() bool {
		series = nexusSeries(t, h2)
		return series["nexus_queue_depth"+fo] == 0
	})
	wantGauges("after the backlog ran", series, 0, 0, 1)
	if diff := cmp.Diff(map[string]float64{
		`nexus_queue_delivered_total{flow="forward-order",outcome="succeeded",tenant="acme"}`: 5,
		`nexus_execution_duration_seconds_count{door="enqueue"}`:                              5,
		`nexus_requests_total{door="enqueue",status="202"}`:                                   1,
	}, pick(series, nil, "nexus_execution_duration_seconds_count", "nexus_queue_delivered_total", `nexus_requests_total{door="enqueue"`)); diff != "" {
		t.Errorf("counters after the backlog ran (-want +got):\n%s", diff)
	}

	// the flow withdrawn from git while a message waits behind one in
	// flight: the one waiting is dropped, its queue's series stay while
	// its files do, the counters keep their values, and the door's
	// refusals add none
	held := make(chan struct{})
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "HELD") {
			<-held
		}
		return http.StatusOK
	})
	t.Cleanup(func() {
		select {
		case <-held:
		default:
			close(held)
		}
	})
	before = nexusSeries(t, h2)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"HELD"}`)
	be.waitBody(t, "/ingest", `{"orderId":"HELD"}`, 10*time.Second)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"LATE"}`)
	h2.waitCommit(repo.commit(map[string]string{"flows/acme/forward-order.md": ""}), 10*time.Second)
	if r := h2.enqueue("acme", "forward-order", acmeKey, `{}`); r.status != http.StatusNotFound {
		t.Errorf("enqueue to a withdrawn flow: %d %s", r.status, r.body)
	}
	close(held)
	waitEvents(t, h2, "queue_dropped", 1, nil, 10*time.Second)
	eventually(t, 5*time.Second, "nexus_queue_depth 0 after the withdrawal", func() bool {
		series = nexusSeries(t, h2)
		return series["nexus_queue_depth"+fo] == 0 && series["nexus_queue_in_flight"+fo] == 0
	})
	wantGauges("after the flow was withdrawn", series, 0, 0, 1)
	if diff := cmp.Diff(map[string]float64{
		`nexus_requests_total{door="enqueue",status="202"}`:                                   2,
		`nexus_requests_total{door="enqueue",status="404"}`:                                   1,
		`nexus_execution_duration_seconds_count{door="enqueue"}`:                              1,
		`nexus_queue_delivered_total{flow="forward-order",outcome="succeeded",tenant="acme"}`: 1,
		`nexus_queue_delivered_total{flow="forward-order",outcome="dropped",tenant="acme"}`:   1,
	}, pick(series, before, "nexus_requests_total", "nexus_execution_duration_seconds_count", "nexus_queue_delivered_total")); diff != "" {
		t.Errorf("counters after the withdrawal, less before (-want +got):\n%s", diff)
	}
	if got := queueLabels(series); !cmp.Equal(got, []string{"acme/forward-order"}) {
		t.Errorf("queue series after the withdrawal: %v, want acme/forward-order alone", got)
	}
}
