package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A host following a repo that changes all the time, under traffic: what a
// busy config repo does to a server over weeks (many publications, the
// clone's packs rolled up again and again, keys coming and going), pressed
// into seconds. A churn soak of this kind found go-git's pack encoder
// reading one pack from two goroutines (a panic of nexus serve after nine
// minutes); the nightly tier runs it for twenty.

// clonePacks is gitsync.MaxPacks: the clone rolls its packs up past it.
const clonePacks = 16

// churnFlow answers which flow and which revision of it ran.
func churnFlow(name string, rev int) string {
	return `---
flowmarkdown_version: "0.1"
flow: ` + name + `
tenant: acme
---

## Step: answer
` + "```ntd" + `
{"flow": "` + name + `", "rev": ` + strconv.Itoa(rev) + `}
` + "```\n"
}

// churnSinkFlow forwards each queued message to sinkURL, its revision in a
// header.
func churnSinkFlow(sinkURL string, rev int) string {
	return `---
flowmarkdown_version: "0.1"
flow: churn-sink
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: ` + sinkURL + `/sink
method: POST
headers: {"X-Rev": "` + strconv.Itoa(rev) + `"}
`
}

// processFigures reads go_goroutines and process_open_fds from h's /metrics.
func processFigures(t *testing.T, h *hostProc) (goroutines, fds int) {
	t.Helper()
	r := h.do(http.MethodGet, "/metrics", "", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %.200s", r.status, r.body)
	}
	for _, line := range strings.Split(r.body, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			goroutines = int(v)
		case "process_open_fds":
			fds = int(v)
		}
	}
	if goroutines == 0 || fds == 0 {
		t.Fatalf("/metrics has no go_goroutines or process_open_fds:\n%.2000s", r.body)
	}
	return goroutines, fds
}

// churnTraffic is the clients of TestDeployChurnUnderTraffic: each loop
// sends one kind of request until stopped and records every answer it did
// not expect.
type churnTraffic struct {
	h       *hostProc
	client  *http.Client
	stopped atomic.Bool
	wg      sync.WaitGroup

	mu         sync.Mutex
	unexpected []string
	acked      map[string]uint64 // payload id → message id of its 202
	answers    map[string]int    // kind of request → answers as expected
}

func (c *churnTraffic) loop(kind string, send func(n int) (method, path, key, body string), ok func(status int, body string) bool) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for n := 0; !c.stopped.Load(); n++ {
			method, path, key, body := send(n)
			req, _ := http.NewRequest(method, c.h.url+path, strings.NewReader(body))
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := c.client.Do(req)
			if err != nil {
				c.note("%s %s: %v", method, path, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !ok(resp.StatusCode, string(b)) {
				c.note("%s %s: %d %.300s", method, path, resp.StatusCode, b)
				continue
			}
			c.mu.Lock()
			c.answers[kind]++
			if resp.StatusCode == http.StatusAccepted {
				var payload struct{ ID string }
				json.Unmarshal([]byte(body), &payload)
				id, _ := strconv.ParseUint(resp.Header.Get("X-Nexus-Message-Id"), 10, 64)
				c.acked[payload.ID] = id
			}
			c.mu.Unlock()
		}
	}()
}

func (c *churnTraffic) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unexpected) < 20 {
		c.unexpected = append(c.unexpected, fmt.Sprintf(format, args...))
	}
}

// TestDeployChurnUnderTraffic commits a change to the repo every few tens
// of milliseconds for 20 s (6 with -short, 20 minutes with NEXUS_SOAK):
// twelve flows changed, withdrawn and added back, a second key added and
// removed, and the queued flow's own revision bumped, while clients run
// the flows, enqueue, and read the operations endpoints. With a poll of
// 200 ms, the clone fetches a pack a round and rolls its packs up every 16.
// Throughout, a stable flow answers 200, a churned one 200 from one of its
// revisions or 404 while withdrawn, the second key 200 or 401, and every
// enqueue 202. At the end the last commit is served exactly, every
// acknowledged message reaches the sink, no sync failed, and the server's
// goroutines and open files are back where they were before the churn.
func TestDeployChurnUnderTraffic(t *testing.T) {
	t.Parallel()
	duration := time.Duration(figure(20, 6, 1200)) * time.Second
	const churned = 12
	sink := newCrashSink(t)
	secondKey := "nxk_acme_churn_second_key_0123456789"
	rev := 0
	present := map[int]bool{}
	keyed := false
	files := map[string]string{
		"access.yaml":              accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/hello.md":      helloFlow,
		"flows/acme/churn-sink.md": churnSinkFlow(sink.URL, rev),
	}
	for i := range churned {
		files[fmt.Sprintf("flows/acme/c%d.md", i)] = churnFlow(fmt.Sprintf("c%d", i), rev)
		present[i] = true
	}
	repo := newConfigRepo(t, files)
	h := startHost(t, hostOptions{repo: repo.dir})
	waitGate(t, h, "acme", "hello", acmeKey)

	// the figures before the churn: the queue's worker started, the
	// clients' connections closed
	mustEnqueue(t, h, "acme", "churn-sink", acmeKey, `{"id":"warm-up"}`)
	eventually(t, 10*time.Second, "the warm-up message delivered", func() bool { return len(sink.missing(map[string]uint64{"warm-up": 0})) == 0 })
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(500 * time.Millisecond)
	goroutinesBefore, fdsBefore := processFigures(t, h)

	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	c := &churnTraffic{h: h, client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		acked: map[string]uint64{}, answers: map[string]int{}}
	for range 2 {
		c.loop("hello", func(int) (string, string, string, string) {
			return http.MethodPost, "/flows/acme/hello/run", acmeKey, `{"name":"churn"}`
		}, func(status int, body string) bool {
			return status == http.StatusOK && strings.Contains(body, "hello, churn")
		})
	}
	for range 2 {
		c.loop("churned", func(n int) (string, string, string, string) {
			return http.MethodPost, fmt.Sprintf("/flows/acme/c%d/run", rand.IntN(churned)), acmeKey, `{}`
		}, func(status int, body string) bool {
			return status == http.StatusNotFound || status == http.StatusOK && strings.Contains(body, `"rev":`)
		})
	}
	for g := range 4 {
		c.loop("enqueue", func(n int) (string, string, string, string) {
			return http.MethodPost, "/flows/acme/churn-sink/enqueue", acmeKey, fmt.Sprintf(`{"id":"g%d-%d"}`, g, n)
		}, func(status int, body string) bool { return status == http.StatusAccepted })
	}
	c.loop("second key", func(int) (string, string, string, string) {
		return http.MethodPost, "/flows/acme/hello/run", secondKey, `{"name":"churn"}`
	}, func(status int, body string) bool {
		return status == http.StatusOK || status == http.StatusUnauthorized
	})
	operations := []string{"/status", "/api/flows", "/metrics", "/readyz"}
	c.loop("operations", func(n int) (string, string, string, string) {
		return http.MethodGet, operations[n%len(operations)], h.adminKey, ""
	}, func(status int, body string) bool { return status == http.StatusOK })

	// the churn, from this goroutine (the repo's helpers may end the test)
	commits := 0
	for end := time.Now().Add(duration); time.Now().Before(end); commits++ {
		rev++
		change := map[string]string{"flows/acme/churn-sink.md": churnSinkFlow(sink.URL, rev)}
		i := rand.IntN(churned)
		switch {
		case present[i] && rev%3 == 0:
			change[fmt.Sprintf("flows/acme/c%d.md", i)] = "" // withdrawn
			present[i] = false
		default:
			change[fmt.Sprintf("flows/acme/c%d.md", i)] = churnFlow(fmt.Sprintf("c%d", i), rev)
			present[i] = true
		}
		if rev%5 == 0 {
			keys := []testKey{{id: "acme-all", tenant: "acme", key: acmeKey}}
			if keyed = !keyed; keyed {
				keys = append(keys, testKey{id: "acme-second", tenant: "acme", key: secondKey})
			}
			change["access.yaml"] = accessYAML(keys...)
		}
		repo.commit(change)
		select {
		case <-h.exited:
			t.Fatalf("nexus serve exited during the churn, after %d commits", commits)
		default:
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
	last := repo.git("rev-parse", "HEAD")
	h.waitCommit(last, 30*time.Second)
	c.stopped.Store(true)
	c.wg.Wait()
	tr.CloseIdleConnections()

	c.mu.Lock()
	unexpected, acked := c.unexpected, c.acked
	t.Logf("%d commits in %v; answers as expected: %v", commits, duration, c.answers)
	c.mu.Unlock()
	for _, u := range unexpected {
		t.Errorf("during the churn: %s", u)
	}
	for kind, n := range c.answers {
		if n == 0 {
			t.Errorf("no %s request was answered as expected", kind)
		}
	}

	// the last commit, exactly
	for i := range churned {
		r := h.run("acme", fmt.Sprintf("c%d", i), acmeKey, `{}`)
		switch {
		case !present[i] && r.status != http.StatusNotFound:
			t.Errorf("c%d, withdrawn by the last commit: %d %s", i, r.status, r.body)
		case present[i] && r.status != http.StatusOK:
			t.Errorf("c%d: %d %s", i, r.status, r.body)
		}
	}
	want := http.StatusUnauthorized
	if keyed {
		want = http.StatusOK
	}
	if r := h.run("acme", "hello", secondKey, `{"name":"x"}`); r.status != want {
		t.Errorf("the second key after the last commit (listed: %v): %d, want %d", keyed, r.status, want)
	}

	// every acknowledged message delivered
	deadline := time.Now().Add(60 * time.Second)
	for len(sink.missing(acked)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if missing := sink.missing(acked); len(missing) > 0 {
		t.Errorf("%d of %d acknowledged messages never reached the sink, e.g. %v", len(missing), len(acked), missing[:min(5, len(missing))])
	}

	// the syncs: none failed, and the clone's packs were rolled up
	if failed := h.events("sync_failed"); len(failed) > 0 {
		t.Errorf("%d syncs failed, the first: %v", len(failed), failed[0])
	}
	if failed := h.events("sync_repack_failed"); len(failed) > 0 {
		t.Errorf("%d packings failed, the first: %v", len(failed), failed[0])
	}
	applied, repacked := len(h.events("sync_applied")), len(h.events("sync_repacked"))
	t.Logf("%d syncs applied, %d packings, %d messages acknowledged", applied, repacked, len(acked))
	// a fetch adds a pack to the clone; past clonePacks they are rolled up
	if !testing.Short() && applied <= clonePacks+1 {
		t.Errorf("%d syncs applied in %v: the churn did not reach the clone's packing", applied, duration)
	}
	if applied > clonePacks+1 && repacked == 0 {
		t.Errorf("%d syncs applied and the clone's packs never rolled up", applied)
	}

	// nothing left behind: goroutines and open files back near where they
	// were (a leak of one per commit or per request would be hundreds)
	goroutines, fds := processFigures(t, h)
	for deadline := time.Now().Add(30 * time.Second); goroutines > goroutinesBefore+40 || fds > fdsBefore+16; {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the churn, %d goroutines (%d before it) and %d open files (%d before it)",
				goroutines, goroutinesBefore, fds, fdsBefore)
		}
		time.Sleep(100 * time.Millisecond)
		goroutines, fds = processFigures(t, h)
	}
	t.Logf("goroutines %d → %d, open files %d → %d", goroutinesBefore, goroutines, fdsBefore, fds)
	select {
	case <-h.exited:
		t.Fatal("nexus serve exited")
	default:
	}
}
