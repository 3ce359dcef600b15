package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The management API (/api/…): what it answers, over real queue files, a
// real registry and its journal; the worker that a replay wakes runs the
// flow through the server.

// adminFixture is a Server with the admin key (unless told otherwise), a
// queue manager over real files whose workers hand their deliveries to the
// server, and the journal written to and read from the registry.
type adminFixture struct {
	*fixture
	cfg    host.Config // the server's config, to build another server over the same state
	root   string      // the queues' root
	queues *queue.Manager
	logs   *jsonlogtest.Buffer
}

// adminOptions adjust newAdminFixture.
type adminOptions struct {
	key        string   // the admin key; "" closes the management endpoints
	noQueues   bool     // Config.Queues nil
	noHistory  bool     // Config.History nil
	unloaded   bool     // nothing published, the live set not loaded
	maxWorkers int      // the manager's residency budget; 0: its default
	fs         queue.FS // the queues' file system; nil: the OS
}

// adminFlows are the test flows and a cron flow with a description.
func adminFlows() map[string]string {
	files := testFlows()
	files["flows/globex/nightly.md"] = flowFile("globex", "nightly",
		"description: \"Nightly <b>report</b> & totals\"\nschedule: \"0 3 * * *\"\nschedule_timezone: Europe/Paris\n", echoSteps)
	return files
}

func newAdminFixture(t *testing.T, o adminOptions) *adminFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clock := clocktest.New(t0)
	reg, err := registry.Open(ctx, filepath.Join(dir, "state", "registry.db"), registry.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	logs := &jsonlogtest.Buffer{}
	logger := logs.Logger(slog.LevelInfo)
	journal := reg.NewJournalWriter(registry.JournalConfig{FlushEvery: 2 * time.Millisecond, Logger: logger})
	journal.Start()
	t.Cleanup(journal.Stop)

	var srv atomic.Pointer[host.Server]
	cfg := host.Config{
		Live: reg, Status: reg, Engine: engine.New(engine.Config{Dedup: reg.Dedup()}),
		Journal: journal, History: reg, Metrics: host.NewMetrics(), Logger: logger,
		Sync: &fakeSyncer{}, Now: clock.Now, AdminKey: o.key,
	}
	root := filepath.Join(dir, "state", "queues")
	if !o.noQueues {
		m := queue.NewManager(queue.ManagerConfig{
			Root: root, FS: o.fs, MaxWorkers: o.maxWorkers, Clock: clock, Now: clock.Now, Logger: logger,
			Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict { return srv.Load().Handle(ctx, d) }),
		})
		t.Cleanup(m.Stop) // before the journal stops and the folder goes
		cfg.Queues = m
	}
	if o.noHistory {
		cfg.History = nil
	}
	s := host.New(cfg)
	srv.Store(s)
	fx := &adminFixture{
		fixture: &fixture{t: t, reg: reg, clock: clock, metrics: cfg.Metrics, syncer: cfg.Sync.(*fakeSyncer), handler: s.Handler()},
		cfg:     cfg, root: root, queues: cfg.Queues, logs: logs,
	}
	if !o.unloaded {
		fx.publish(adminFlows(), testAccessYAML(), fixtureCommit)
	}
	return fx
}

// bearerAdmin is the Authorization header with the admin key.
var bearerAdmin = []string{"Authorization", "Bearer " + adminKey}

// admin sends method path with the admin key as a Bearer token.
func (fx *adminFixture) admin(method, path string) *httptest.ResponseRecorder {
	return fx.serve(newRequest(method, path, "", bearerAdmin...))
}

// jsonDiff is the go-cmp diff between the JSON documents want and got, ""
// when they are the same document.
func jsonDiff(t *testing.T, got []byte, want string) string {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("the answer %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the wanted document %q is not JSON: %v", want, err)
	}
	return cmp.Diff(w, g)
}

// wantDocument checks a 200 JSON answer whose body is the document want.
func wantDocument(t *testing.T, w *httptest.ResponseRecorder, want string) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200 (body %s)", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if w.Header().Get("X-Correlation-Id") == "" {
		t.Error("no X-Correlation-Id on the answer")
	}
	if d := jsonDiff(t, w.Body.Bytes(), want); d != "" {
		t.Errorf("body (-want +got):\n%s", d)
		return
	}
	// the same document: its keys in the order docs/management.md gives
	if got, wantKeys := keyOrder(w.Body.Bytes()), keyOrder([]byte(want)); !slices.Equal(got, wantKeys) {
		t.Errorf("body keys in another order:\n got %q\nwant %q", got, wantKeys)
	}
}

// keyOrder lists a JSON document's object keys in the order they come.
func keyOrder(doc []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var keys []string
	var inObject []bool // for each open container: an object?
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return keys
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				inObject = append(inObject, true)
				expectKey = true
				continue
			case '[':
				inObject = append(inObject, false)
			default:
				inObject = inObject[:len(inObject)-1]
			}
		case string:
			if expectKey {
				keys = append(keys, v)
				expectKey = false
				continue
			}
		}
		expectKey = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}

// mustJSON is v's JSON.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// seedQueue opens tenant/flow's queue under root as another process (or
// an earlier run) would, lets fill write into it, and closes it, so that
// the server's manager finds only files.
func seedQueue(t *testing.T, root, tenant, flowName string, now func() time.Time, fill func(q *queue.Queue)) {
	t.Helper()
	q, damage, err := queue.Open(root, tenant, flowName, queue.Options{Now: now, GatherWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(damage) > 0 {
		t.Fatalf("damage in a fresh queue: %v", damage)
	}
	defer func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}()
	fill(q)
}

// appendMessages appends one message per payload, with the correlation
// IDs orig-1, orig-2, … and returns them.
func appendMessages(t *testing.T, q *queue.Queue, payloads ...string) []queue.Message {
	t.Helper()
	var out []queue.Message
	for _, p := range payloads {
		m, err := q.Append(queue.NewMessage{Source: engine.DoorEnqueue, CorrelationID: "orig-" + strconv.Itoa(len(out)+1), Payload: []byte(p)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// processed saves the checkpoint after the first n of msgs (all of the log
// when n is len(msgs)).
func processed(t *testing.T, q *queue.Queue, msgs []queue.Message, n int) {
	t.Helper()
	offset, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if n < len(msgs) {
		offset = msgs[n].Offset
	}
	if err := q.SaveCheckpoint(offset); err != nil {
		t.Fatal(err)
	}
}

// deadLetter moves m to q's dead-letter queue.
func deadLetter(t *testing.T, q *queue.Queue, m queue.Message, failedAt time.Time, attempts int, lastError string) {
	t.Helper()
	if err := q.MoveToDLQ(queue.DeadLetter{ID: m.ID, EnqueuedAt: m.EnqueuedAt, FailedAt: failedAt, Attempts: attempts,
		LastError: lastError, Payload: m.Payload}); err != nil {
		t.Fatal(err)
	}
}

// seedDeadLetters fills tenant/flow's queue with one processed message
// per payload, each moved to the dead-letter queue (ids 1, 2, …).
func seedDeadLetters(t *testing.T, root, tenant, flowName string, payloads ...string) {
	t.Helper()
	seedQueue(t, root, tenant, flowName, func() time.Time { return t0 }, func(q *queue.Queue) {
		msgs := appendMessages(t, q, payloads...)
		processed(t, q, msgs, len(msgs))
		for _, m := range msgs {
			deadLetter(t, q, m, t0.Add(time.Minute), 3, "step call: 502 from upstream")
		}
	})
}

// seedTwoQueues fills acme/echo with 4 messages, the first two processed
// and dead-lettered, the third waiting for its second attempt; and
// globex/shipment with one message, processed.
func seedTwoQueues(t *testing.T, fx *adminFixture) {
	t.Helper()
	seedQueue(t, fx.root, "acme", "echo", fx.clock.Now, func(q *queue.Queue) {
		msgs := appendMessages(t, q, `{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`)
		processed(t, q, msgs, 2)
		deadLetter(t, q, msgs[0], t0, 3, "x")
		deadLetter(t, q, msgs[1], t0, 3, "y")
		if err := q.SaveRetries([]queue.Retry{{ID: msgs[2].ID, Offset: msgs[2].Offset, Attempt: 2, Due: t0.Add(time.Hour)}}); err != nil {
			t.Fatal(err)
		}
	})
	seedQueue(t, fx.root, "globex", "shipment", fx.clock.Now, func(q *queue.Queue) {
		processed(t, q, appendMessages(t, q, `{}`), 1)
	})
}

// dirs lists the folders under root, relative to it and sorted; nil when
// root does not exist.
func dirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// pendingIDs are the ids GET /api/queues/{tenant}/{flow}/dlq lists.
func (fx *adminFixture) pendingIDs(t *testing.T, tenant, flowName string) []uint64 {
	t.Helper()
	w := fx.admin(http.MethodGet, "/api/queues/"+tenant+"/"+flowName+"/dlq")
	if w.Code != http.StatusOK {
		t.Fatalf("listing the dead letters of %s/%s: %d %s", tenant, flowName, w.Code, w.Body)
	}
	var doc struct {
		DeadLetters []struct {
			ID uint64 `json:"id"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	ids := []uint64{}
	for _, d := range doc.DeadLetters {
		ids = append(ids, d.ID)
	}
	return ids
}

// counts reads tenant/flow's queue from its files: what the log holds.
func (fx *adminFixture) counts(t *testing.T, tenant, flowName string) queue.Counts {
	t.Helper()
	c, err := queue.ReadCounts(fx.root, tenant, flowName, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// managementRequests are one request of each management endpoint.
var managementRequests = []struct{ method, path string }{
	{http.MethodGet, "/api/flows"},
	{http.MethodGet, "/api/queues"},
	{http.MethodGet, "/api/queues/acme/echo/dlq"},
	{http.MethodPost, "/api/queues/acme/echo/dlq/1/replay"},
	{http.MethodPost, "/api/queues/acme/echo/dlq/1/discard"},
	{http.MethodGet, "/api/journal"},
	{http.MethodGet, "/api/journal?tenant=acme&flow=echo&limit=5"},
	{http.MethodGet, "/ui/"},
	{http.MethodGet, "/ui/login"},
	{http.MethodGet, "/ui/login?next=/ui/queues"},
	{http.MethodPost, "/ui/login"},
	{http.MethodPost, "/ui/logout"},
	{http.MethodGet, "/ui/queues"},
	{http.MethodGet, "/ui/queues/acme/echo"},
	{http.MethodPost, "/ui/queues/acme/echo/dlq/1/replay"},
	{http.MethodPost, "/ui/queues/acme/echo/dlq/1/discard"},
	{http.MethodGet, "/ui/journal"},
	{http.MethodGet, "/ui/journal?limit=3"},
}

func TestManagementClosedWithoutAdminKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	before := dirs(t, fx.root)
	// another host's session cookie, made with some admin key
	other := newAdminFixture(t, adminOptions{key: adminKey})
	cookie := other.login(t)

	for _, rq := range managementRequests {
		for _, auth := range []struct {
			name   string
			header []string
			cookie *http.Cookie
		}{
			{"no key", nil, nil},
			{"a Bearer key", []string{"Authorization", "Bearer " + adminKey}, nil},
			{"an empty Bearer key", []string{"Authorization", "Bearer "}, nil},
			{"a session cookie", nil, cookie},
		} {
			t.Run(rq.method+" "+rq.path+" with "+auth.name, func(t *testing.T) {
				r := newRequest(rq.method, rq.path, "key="+adminKey, auth.header...)
				if rq.method == http.MethodPost {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if auth.cookie != nil {
					r.AddCookie(auth.cookie)
				}
				w := fx.serve(r)
				path, _, _ := strings.Cut(rq.path, "?")
				wantRefusal(t, w, http.StatusNotFound, "no such endpoint: "+rq.method+" "+path)
				if c := w.Result().Cookies(); len(c) > 0 {
					t.Errorf("cookies set: %v", c)
				}
			})
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending dead letters after the refused requests: %v, want [1]", got)
	}
	if after := dirs(t, fx.root); !slices.Equal(before, after) {
		t.Errorf("the queue folders changed: %v, then %v", before, after)
	}

	// every /ui/… and /api/… path answers 404, whatever its method, and so
	// does /ui: none of them may say that an endpoint exists (no 405, no
	// redirect)
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, "/ui"},
		{http.MethodDelete, "/api/flows"},
		{http.MethodGet, "/api/queues/acme/echo/dlq/1/replay"},
		{http.MethodGet, "/ui/logout"},
		{http.MethodPut, "/ui/queues/acme/echo"},
		{http.MethodGet, "/api/nope"},
		{http.MethodGet, "/ui/nope"},
	} {
		t.Run("other: "+rq.method+" "+rq.path, func(t *testing.T) {
			w := fx.serve(newRequest(rq.method, rq.path, ""))
			wantRefusalPrefix(t, w, http.StatusNotFound, "no such endpoint")
		})
	}
}

// pendingIDsFromFiles reads the pending dead letters from the queue's files.
func (fx *adminFixture) pendingIDsFromFiles(t *testing.T, tenant, flowName string) []uint64 {
	t.Helper()
	dl, _, err := queue.ReadDeadLetters(fx.root, tenant, flowName, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint64{}
	for _, d := range dl {
		ids = append(ids, d.ID)
	}
	return ids
}

func TestAPIAdminKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	before := fx.counts(t, "acme", "echo")

	for _, rq := range managementRequests {
		if !strings.HasPrefix(rq.path, "/api/") {
			continue
		}
		for _, tc := range []struct{ name, authorization string }{
			{"no key", ""},
			{"wrong key", "Bearer not-the-admin-key"},
			{"admin key with a byte more", "Bearer " + adminKey + "x"},
			{"admin key's prefix", "Bearer " + adminKey[:len(adminKey)-1]},
			{"an access key", "Bearer " + keyAcmeAll},
			{"Basic", "Basic " + adminKey},
			{"the bare key", adminKey},
			{"an empty Bearer", "Bearer "},
		} {
			t.Run(rq.method+" "+rq.path+": 401 for "+tc.name, func(t *testing.T) {
				var h []string
				if tc.authorization != "" {
					h = []string{"Authorization", tc.authorization}
				}
				w := fx.serve(newRequest(rq.method, rq.path, "", h...))
				wantRefusal(t, w, http.StatusUnauthorized, "missing or unknown admin key")
				if got := w.Header().Get("WWW-Authenticate"); got != "Bearer" {
					t.Errorf("WWW-Authenticate = %q, want Bearer", got)
				}
			})
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending dead letters after the refused requests: %v, want [1]", got)
	}
	if got := fx.counts(t, "acme", "echo"); got != before {
		t.Errorf("the log changed: %+v, then %+v", before, got)
	}

	for _, authorization := range []string{"Bearer " + adminKey, "bearer " + adminKey, "BEARER  " + adminKey + " "} {
		t.Run("200 with "+authorization, func(t *testing.T) {
			for _, path := range []string{"/api/flows", "/api/queues", "/api/queues/acme/echo/dlq", "/api/journal"} {
				w := fx.serve(newRequest(http.MethodGet, path, "", "Authorization", authorization))
				if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Correlation-Id") == "" {
					t.Errorf("%s: %d %q %s", path, w.Code, w.Header().Get("Content-Type"), w.Body)
				}
			}
		})
	}
}

// The documents of GET /api/flows.
type (
	flowsDoc struct {
		Commit    string        `json:"commit"`
		SyncedAt  string        `json:"synced_at"`
		LastError *lastErrorDoc `json:"last_error"`
		SyncError *syncErrorDoc `json:"sync_error"`
		Flows     []flowDoc     `json:"flows"`
		Keys      []keyDoc      `json:"keys"`
	}
	syncErrorDoc struct {
		Since    string `json:"since"`
		Failures int    `json:"failures"`
		Error    string `json:"error"`
	}
	keyDoc struct {
		ID     string   `json:"id"`
		Tenant string   `json:"tenant"`
		Flows  []string `json:"flows"`
		Rate   float64  `json:"rate"`
		Burst  int      `json:"burst"`
	}
	lastErrorDoc struct {
		Commit string   `json:"commit"`
		Errors []string `json:"errors"`
	}
	flowDoc struct {
		Tenant      string       `json:"tenant"`
		Flow        string       `json:"flow"`
		Version     int          `json:"version"`
		Commit      string       `json:"commit"`
		PublishedAt string       `json:"published_at"`
		Path        string       `json:"path"`
		SHA256      string       `json:"sha256"`
		Description string       `json:"description"`
		Schedule    *scheduleDoc `json:"schedule"`
	}
	scheduleDoc struct {
		Spec string `json:"spec"`
		Zone string `json:"zone"`
		Next string `json:"next"`
	}
)

// wantFlows is what GET /api/flows lists for files published as commit at
// publishedAt, each at version 1.
func wantFlows(t *testing.T, files map[string]string, commit, publishedAt string) []flowDoc {
	t.Helper()
	var out []flowDoc
	for path, src := range files {
		f, err := flow.Compile(path, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(f.Artifact())
		out = append(out, flowDoc{Tenant: f.Tenant(), Flow: f.Name(), Version: 1, Commit: commit, PublishedAt: publishedAt,
			Path: path, SHA256: hex.EncodeToString(sum[:]), Description: f.Description()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Flow < out[j].Flow
	})
	return out
}

func TestAPIFlows(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.clock.Advance(30 * time.Minute) // the next tick is computed from now, not from the sync
	flows := wantFlows(t, adminFlows(), fixtureCommit, "2026-08-09T14:02:11Z")
	var names []string
	for i, f := range flows {
		names = append(names, f.Tenant+"/"+f.Flow)
		if f.Flow == "nightly" {
			// 03:00 in Paris (UTC+2 in August) the next morning
			flows[i].Schedule = &scheduleDoc{Spec: "0 3 * * *", Zone: "Europe/Paris", Next: "2026-08-10T01:00:00Z"}
			if f.Description != "Nightly <b>report</b> & totals" {
				t.Fatalf("the fixture's description: %q", f.Description)
			}
		}
	}
	if want := []string{"acme/echo", "acme/hello", "acme/order-intake", "acme/small", "globex/nightly", "globex/shipment"}; !slices.Equal(names, want) {
		t.Fatalf("the fixture's flows: %v, want %v", names, want)
	}

	t.Run("the live set", func(t *testing.T) {
		w := fx.admin(http.MethodGet, "/api/flows")
		wantDocument(t, w, mustJSON(t, flowsDoc{Commit: fixtureCommit, SyncedAt: "2026-08-09T14:02:11Z", Flows: flows, Keys: testKeys}))
		if !strings.Contains(w.Body.String(), `"last_error":null`) || !strings.Contains(w.Body.String(), `"schedule":null`) {
			t.Errorf("last_error and a flow without a schedule must be null: %s", w.Body)
		}
	})

	t.Run("after a refused commit", func(t *testing.T) {
		const bad = "badbadbadbadbadbadbadbadbadbadbadbadbadb"
		errs := []string{`flows/x.md:7: unknown key "endpont" (did you mean "endpoint"?)`, "access.yaml:3: rate must be more than 0, not 0"}
		if err := fx.reg.RecordSyncFailure(context.Background(), bad, errs, registry.SyncSource{}); err != nil {
			t.Fatal(err)
		}
		wantDocument(t, fx.admin(http.MethodGet, "/api/flows"), mustJSON(t, flowsDoc{
			Commit: fixtureCommit, SyncedAt: "2026-08-09T14:02:11Z", LastError: &lastErrorDoc{Commit: bad, Errors: errs}, Flows: flows, Keys: testKeys,
		}))
	})

	t.Run("a new commit", func(t *testing.T) {
		const commit = "2222222222222222222222222222222222222222"
		files := adminFlows()
		delete(files, "flows/acme/small.md")
		files["flows/acme/echo.md"] = flowFile("acme", "echo", "description: echo v2\n", echoSteps)
		fx.publish(files, testAccessYAML(), commit)
		want := wantFlows(t, files, fixtureCommit, "2026-08-09T14:02:11Z")
		for i := range want {
			switch want[i].Flow {
			case "echo":
				want[i].Version, want[i].Commit, want[i].PublishedAt = 2, commit, "2026-08-09T14:32:11Z"
			case "nightly":
				want[i].Schedule = &scheduleDoc{Spec: "0 3 * * *", Zone: "Europe/Paris", Next: "2026-08-10T01:00:00Z"}
			}
		}
		wantDocument(t, fx.admin(http.MethodGet, "/api/flows"), mustJSON(t, flowsDoc{Commit: commit, SyncedAt: "2026-08-09T14:32:11Z", Flows: want, Keys: testKeys}))
	})

	t.Run("nothing loaded", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, unloaded: true})
		w := fx.admin(http.MethodGet, "/api/flows")
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if string(doc["flows"]) != "[]" || string(doc["keys"]) != "[]" || string(doc["last_error"]) != "null" || string(doc["commit"]) != "null" || string(doc["synced_at"]) != "null" {
			t.Errorf("flows = %s, keys = %s, last_error = %s, commit = %s, synced_at = %s; want [], [] and three nulls, as /status says (%s)",
				doc["flows"], doc["keys"], doc["last_error"], doc["commit"], doc["synced_at"], w.Body)
		}
	})
}

// testKeys are testAccessYAML's keys as GET /api/flows lists them: by id,
// never the key or its hash.
var testKeys = []keyDoc{
	{ID: "acme-all", Tenant: "acme", Flows: []string{"*"}},
	{ID: "acme-orders", Tenant: "acme", Flows: []string{"order-intake"}},
	{ID: "globex-all", Tenant: "globex", Flows: []string{"*"}},
	{ID: "acme-limited", Tenant: "acme", Flows: []string{"*"}, Rate: 1, Burst: 1},
	{ID: "acme-slow", Tenant: "acme", Flows: []string{"*"}, Rate: 0.4, Burst: 1},
}

// queueDoc is one queue of GET /api/queues.
type queueDoc struct {
	Tenant      string `json:"tenant"`
	Flow        string `json:"flow"`
	Total       int64  `json:"total"`
	Processed   int64  `json:"processed"`
	Pending     int64  `json:"pending"`
	Retrying    int    `json:"retrying"`
	DeadLetters int    `json:"dead_letters"`
	// DamagedDeadLetters are dead letters whose frames cannot be read
	DamagedDeadLetters int    `json:"damaged_dead_letters"`
	InFlight           int    `json:"in_flight"`
	Worker             string `json:"worker"`
}

// queuesDoc is GET /api/queues.
type queuesDoc struct {
	Queues []queueDoc `json:"queues"`
}

// waitLeading polls until tenant/flow's worker in m leads.
func waitLeading(t *testing.T, m *queue.Manager, tenant, flowName string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, info := range m.Queues() {
			if info.Tenant == tenant && info.Flow == flowName && info.State.Leading {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker of %s/%s did not start leading", tenant, flowName)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAPIQueues(t *testing.T) {
	t.Run("no queue yet", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey})
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues"), `{"queues":[]}`)
		if d := dirs(t, fx.root); d != nil {
			t.Errorf("folders created under the queues' root: %v", d)
		}
	})

	t.Run("no queues on this host", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, noQueues: true})
		wantRefusal(t, fx.admin(http.MethodGet, "/api/queues"), http.StatusNotFound, "this host runs no queues: no such endpoint: GET /api/queues")
		wantRefusal(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq"), http.StatusNotFound,
			"this host runs no queues: no such endpoint: GET /api/queues/acme/echo/dlq")
		wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay"), http.StatusNotFound,
			"this host runs no queues: no such endpoint: POST /api/queues/acme/echo/dlq/1/replay")
	})

	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	// acme/order-intake: 3 messages, the checkpoint after the first
	seedQueue(t, fx.root, "acme", "order-intake", fx.clock.Now, func(q *queue.Queue) {
		processed(t, q, appendMessages(t, q, `{"a":1}`, `{"a":2}`, `{"a":3}`), 1)
	})
	// a folder that breaks the name rule is no queue
	if err := os.MkdirAll(filepath.Join(fx.root, "Acme", "echo"), 0o755); err != nil {
		t.Fatal(err)
	}

	wantDocument(t, fx.admin(http.MethodGet, "/api/queues"), mustJSON(t, queuesDoc{Queues: []queueDoc{
		{Tenant: "acme", Flow: "echo", Total: 4, Processed: 2, Pending: 2, Retrying: 1, DeadLetters: 2, Worker: "idle"},
		{Tenant: "acme", Flow: "order-intake", Total: 3, Processed: 1, Pending: 2, Worker: "idle"},
		{Tenant: "globex", Flow: "shipment", Total: 1, Processed: 1, Worker: "idle"},
	}}))

	// another process leads acme/hello: this one's worker stands by
	other := queue.NewManager(queue.ManagerConfig{Root: fx.root, Clock: fx.clock, Now: fx.clock.Now, Logger: fx.cfg.Logger,
		Handler: queue.HandlerFunc(func(context.Context, queue.Delivery) queue.Verdict { return queue.Verdict{Kind: queue.VerdictAck} })})
	t.Cleanup(other.Stop)
	if _, _, err := other.Queue("acme", "hello"); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, other, "acme", "hello")
	if _, _, err := fx.queues.Queue("acme", "hello"); err != nil {
		t.Fatal(err)
	}
	// this process leads globex/nightly
	if _, _, err := fx.queues.Queue("globex", "nightly"); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, fx.queues, "globex", "nightly")

	wantDocument(t, fx.admin(http.MethodGet, "/api/queues"), mustJSON(t, queuesDoc{Queues: []queueDoc{
		{Tenant: "acme", Flow: "echo", Total: 4, Processed: 2, Pending: 2, Retrying: 1, DeadLetters: 2, Worker: "idle"},
		{Tenant: "acme", Flow: "hello", Worker: "standby"},
		{Tenant: "acme", Flow: "order-intake", Total: 3, Processed: 1, Pending: 2, Worker: "idle"},
		{Tenant: "globex", Flow: "nightly", Worker: "leading"},
		{Tenant: "globex", Flow: "shipment", Total: 1, Processed: 1, Worker: "idle"},
	}}))
}

func TestAPIDeadLetters(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	enqueued := t0.Add(999 * time.Millisecond) // whole seconds: 14:02:11
	seedQueue(t, fx.root, "acme", "echo", func() time.Time { return enqueued }, func(q *queue.Queue) {
		msgs := appendMessages(t, q, `{"n":1}`, "\xff\xfe binary \x00", `{"ok":true}`, `{"n":"é"}`, "")
		processed(t, q, msgs, len(msgs))
		deadLetter(t, q, msgs[0], t0.Add(90*time.Second+500*time.Millisecond).In(paris), 3, "step call: 502 from upstream")
		deadLetter(t, q, msgs[1], t0.Add(2*time.Minute), 1, "the stored message is not a JSON document")
		deadLetter(t, q, msgs[3], t0.Add(3*time.Minute), 5, `quote " and <tag>`)
		deadLetter(t, q, msgs[4], t0.Add(4*time.Minute), 1, "empty")
		// the third message stays in the log only
	})
	before := dirs(t, fx.root)

	wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq"), `{"tenant":"acme","flow":"echo","total":4,"next_after":null,"prev_after":null,"last_after":null,"dead_letters":[
		{"id":1,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:03:41Z","attempts":3,"last_error":"step call: 502 from upstream","payload":"{\"n\":1}","payload_bytes":7,"truncated":false},
		{"id":2,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:04:11Z","attempts":1,"last_error":"the stored message is not a JSON document","payload_base64":"//4gYmluYXJ5IAA=","payload_bytes":11,"truncated":false},
		{"id":4,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:05:11Z","attempts":5,"last_error":"quote \" and <tag>","payload":"{\"n\":\"é\"}","payload_bytes":10,"truncated":false},
		{"id":5,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:06:11Z","attempts":1,"last_error":"empty","payload":"","payload_bytes":0,"truncated":false}
	]}`)

	t.Run("pages", func(t *testing.T) {
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq?limit=2"), `{"tenant":"acme","flow":"echo","total":4,"next_after":2,"prev_after":null,"last_after":2,"dead_letters":[
			{"id":1,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:03:41Z","attempts":3,"last_error":"step call: 502 from upstream","payload":"{\"n\":1}","payload_bytes":7,"truncated":false},
			{"id":2,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:04:11Z","attempts":1,"last_error":"the stored message is not a JSON document","payload_base64":"//4gYmluYXJ5IAA=","payload_bytes":11,"truncated":false}
		]}`)
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq?after=2&limit=2"), `{"tenant":"acme","flow":"echo","total":4,"next_after":null,"prev_after":0,"last_after":null,"dead_letters":[
			{"id":4,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:05:11Z","attempts":5,"last_error":"quote \" and <tag>","payload":"{\"n\":\"é\"}","payload_bytes":10,"truncated":false},
			{"id":5,"enqueued_at":"2026-08-09T14:02:11Z","failed_at":"2026-08-09T14:06:11Z","attempts":1,"last_error":"empty","payload":"","payload_bytes":0,"truncated":false}
		]}`)
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq?after=5"), `{"tenant":"acme","flow":"echo","total":4,"next_after":null,"prev_after":0,"last_after":null,"dead_letters":[]}`)
		for _, q := range []string{"limit=0", "limit=501", "limit=x", "after=-1", "after=x"} {
			if w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq?"+q); w.Code != http.StatusBadRequest {
				t.Errorf("?%s: %d %s, want 400", q, w.Code, w.Body)
			}
		}
	})

	t.Run("the whole payload", func(t *testing.T) {
		w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq/2/payload")
		if w.Code != http.StatusOK || w.Body.String() != "\xff\xfe binary \x00" {
			t.Errorf("payload of 2: %d %q", w.Code, w.Body)
		}
		for h, want := range map[string]string{"Content-Type": "application/octet-stream", "Content-Disposition": `attachment; filename="acme-echo-2.payload"`,
			"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
			if got := w.Header().Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
		wantRefusal(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq/3/payload"), http.StatusNotFound, "no pending dead letter id=3 tenant=acme flow=echo")
		if w := fx.serve(newRequest(http.MethodGet, "/api/queues/acme/echo/dlq/2/payload", "")); w.Code != http.StatusUnauthorized {
			t.Errorf("without the key: %d", w.Code)
		}
	})

	t.Run("a queue without files", func(t *testing.T) {
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/hello/dlq"), `{"tenant":"acme","flow":"hello","total":0,"next_after":null,"prev_after":null,"last_after":null,"dead_letters":[]}`)
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/nobody/nothing/dlq"), `{"tenant":"nobody","flow":"nothing","total":0,"next_after":null,"prev_after":null,"last_after":null,"dead_letters":[]}`)
	})

	for _, tc := range []struct{ name, tenant, flow, want string }{
		{"upper case tenant", "A", "echo", `invalid name "A" for tenant (flow "echo"): character 'A' at position 1 is not allowed`},
		{"a dot in the flow", "acme", "a.b", `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		{"dot dot", "..", "echo", `invalid name ".." for tenant (flow "echo"): character '.' at position 1 is not allowed`},
		{"dot", "acme", ".", `invalid name "." for flow (tenant "acme"): character '.' at position 1 is not allowed`},
		{"a leading dash", "-acme", "echo", `invalid name "-acme" for tenant (flow "echo"): character '-' at position 1 is not allowed`},
		{"non-ASCII", "%C3%A9t%C3%A9", "echo", `invalid name "été" for tenant (flow "echo"): character 'é' at position 1 is not allowed`},
		{"a NUL byte", "acme", "ec%00ho", `invalid name "ec\x00ho" for flow (tenant "acme"): character '\x00' at position 3 is not allowed`},
		{"a backslash", "acme", `..%5C..%5Cetc`, `invalid name "..\\..\\etc" for flow (tenant "acme"): character '.' at position 1 is not allowed`},
		{"65 characters", strings.Repeat("a", 65), "echo", `invalid name "` + strings.Repeat("a", 65) + `" for tenant (flow "echo"): the name is 65 characters long, more than 64`},
		{"both bad: the tenant first", "A", "B", `invalid name "A" for tenant (flow "B"): character 'A' at position 1 is not allowed`},
	} {
		t.Run("400 for "+tc.name, func(t *testing.T) {
			for _, rq := range []struct{ method, path string }{
				{http.MethodGet, "/api/queues/" + tc.tenant + "/" + tc.flow + "/dlq"},
				{http.MethodPost, "/api/queues/" + tc.tenant + "/" + tc.flow + "/dlq/1/replay"},
				{http.MethodPost, "/api/queues/" + tc.tenant + "/" + tc.flow + "/dlq/1/discard"},
			} {
				wantRefusal(t, fx.admin(rq.method, rq.path), http.StatusBadRequest, tc.want)
			}
		})
	}
	t.Run("a slash in a name", func(t *testing.T) {
		// an escaped slash is decoded before routing: no route takes it
		for _, path := range []string{"/api/queues/..%2Fx/echo/dlq", "/api/queues/acme/..%2F..%2Fx/dlq", "/api/queues/..%2F..%2F..%2Ftmp/x/dlq/1/replay"} {
			method := http.MethodGet
			if strings.HasSuffix(path, "/replay") {
				method = http.MethodPost
			}
			w := fx.admin(method, path)
			if w.Code != http.StatusNotFound && w.Code != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s, want 404 or 400", method, path, w.Code, w.Body)
			}
		}
	})
	if after := dirs(t, fx.root); !slices.Equal(before, after) {
		t.Errorf("the queue folders changed: %v, then %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(fx.root), "x")); !os.IsNotExist(err) {
		t.Errorf("a folder was made beside the queues' root: %v", err)
	}
}

// journalDoc is one entry of GET /api/journal.
type journalDoc struct {
	At            string `json:"at"`
	Door          string `json:"door"`
	Tenant        string `json:"tenant"`
	Flow          string `json:"flow"`
	Version       int    `json:"version"`
	CorrelationID string `json:"correlation_id"`
	MsgID         int64  `json:"msg_id"`
	Attempt       int    `json:"attempt"`
	Outcome       string `json:"outcome"`
	Status        int    `json:"status"`
	DurationMS    int64  `json:"duration_ms"`
	Error         string `json:"error"`
}

// journal is GET /api/journal?query with the admin key.
func (fx *adminFixture) journal(t *testing.T, query string) []journalDoc {
	t.Helper()
	w := fx.admin(http.MethodGet, "/api/journal?"+query)
	if w.Code != http.StatusOK {
		t.Fatalf("/api/journal?%s: %d %s", query, w.Code, w.Body)
	}
	var doc struct {
		Entries []journalDoc `json:"entries"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Entries
}

// writeJournal writes entries into the registry's journal and waits until
// they are written.
func writeJournal(t *testing.T, reg *registry.Registry, entries ...registry.Entry) {
	t.Helper()
	w := reg.NewJournalWriter(registry.JournalConfig{Logger: slog.New(slog.DiscardHandler)})
	w.Start()
	for _, e := range entries {
		w.Append(e)
	}
	w.Stop()
	if w.Written() != int64(len(entries)) {
		t.Fatalf("%d journal entries written, want %d", w.Written(), len(entries))
	}
}

// testJournal are three executions, oldest first, and their documents.
func testJournal() ([]registry.Entry, []journalDoc) {
	entries := []registry.Entry{
		{At: t0.Add(time.Second + 250*time.Millisecond), Door: "run", Tenant: "acme", Flow: "echo", Version: 1, CorrelationID: "corr-1",
			Attempt: 1, Outcome: "succeeded", Status: 200, Duration: 1500 * time.Microsecond},
		{At: t0.Add(2*time.Second + 700*time.Millisecond), Door: "enqueue", Tenant: "acme", Flow: "hello", Version: 2, CorrelationID: "corr-2",
			MsgID: 7, Attempt: 3, Outcome: "failed", Status: 502, Duration: 2250 * time.Millisecond, Error: "step call: 502 <from> upstream"},
		{At: t0.Add(3 * time.Second), Door: "cron", Tenant: "globex", Flow: "nightly", Version: 1, CorrelationID: "corr-3",
			MsgID: 12, Attempt: 1, Outcome: "fault_handled", Status: 200},
	}
	docs := []journalDoc{
		{At: "2026-08-09T14:02:12Z", Door: "run", Tenant: "acme", Flow: "echo", Version: 1, CorrelationID: "corr-1",
			Attempt: 1, Outcome: "succeeded", Status: 200, DurationMS: 1},
		{At: "2026-08-09T14:02:13Z", Door: "enqueue", Tenant: "acme", Flow: "hello", Version: 2, CorrelationID: "corr-2",
			MsgID: 7, Attempt: 3, Outcome: "failed", Status: 502, DurationMS: 2250, Error: "step call: 502 <from> upstream"},
		{At: "2026-08-09T14:02:14Z", Door: "cron", Tenant: "globex", Flow: "nightly", Version: 1, CorrelationID: "corr-3",
			MsgID: 12, Attempt: 1, Outcome: "fault_handled", Status: 200},
	}
	return entries, docs
}

func TestAPIJournal(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	wantDocument(t, fx.admin(http.MethodGet, "/api/journal"), `{"entries":[],"next_before":null}`)
	entries, docs := testJournal()
	writeJournal(t, fx.reg, entries...)
	e1, e2, e3 := docs[0], docs[1], docs[2]
	// the cursor of an entry: its time in microseconds and its row
	cursor := func(i int) *string {
		c := fmt.Sprintf("%d.%d", entries[i].At.UnixMicro(), i+1)
		return &c
	}

	for _, tc := range []struct {
		query string
		want  []journalDoc
		next  *string // a full page has one
	}{
		{"", []journalDoc{e3, e2, e1}, nil},
		{"limit=1000", []journalDoc{e3, e2, e1}, nil},
		{"limit=1", []journalDoc{e3}, cursor(2)},
		{"limit=2", []journalDoc{e3, e2}, cursor(1)},
		{"limit=2&before=" + *cursor(1), []journalDoc{e1}, nil},
		{"limit=3", []journalDoc{e3, e2, e1}, cursor(0)},
		{"limit=3&before=" + *cursor(0), []journalDoc{}, nil},
		{"tenant=acme", []journalDoc{e2, e1}, nil},
		{"tenant=acme&flow=echo", []journalDoc{e1}, nil},
		{"correlation_id=corr-2", []journalDoc{e2}, nil},
		{"tenant=globex&correlation_id=corr-2", []journalDoc{}, nil},
		{"flow=nightly", []journalDoc{e3}, nil},
		{"tenant=acme&limit=1", []journalDoc{e2}, cursor(1)},
		{"tenant=acme&limit=1&before=" + *cursor(1), []journalDoc{e1}, cursor(0)},
		{"tenant=nobody", []journalDoc{}, nil},
		{"tenant=globex&flow=echo", []journalDoc{}, nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			w := fx.admin(http.MethodGet, "/api/journal?"+tc.query)
			wantDocument(t, w, mustJSON(t, struct {
				Entries    []journalDoc `json:"entries"`
				NextBefore *string      `json:"next_before"`
			}{tc.want, tc.next}))
		})
	}

	for _, tc := range []struct{ query, limit string }{
		{"0", "0"}, {"abc", "abc"}, {"1001", "1001"}, {"-1", "-1"}, {"1.5", "1.5"}, {"%20", " "}, {"1e3", "1e3"},
	} {
		t.Run("400 for limit="+tc.query, func(t *testing.T) {
			w := fx.admin(http.MethodGet, "/api/journal?tenant=acme&limit="+tc.query)
			wantRefusal(t, w, http.StatusBadRequest, "limit "+strconv.Quote(tc.limit)+" is not a number from 1 to 1000")
		})
	}

	// a name no flow could have is said, as nexus journal says it, not
	// answered with an empty journal
	for _, tc := range []struct{ query, want string }{
		{"tenant=Bad", `invalid name "Bad" for tenant (any flow): character 'B' at position 1 is not allowed`},
		{"tenant=acme&flow=a.b", `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		{"flow=a.b", `invalid name "a.b" for flow (any tenant): character '.' at position 2 is not allowed`},
		{"correlation_id=", "correlation_id is empty: give one, or leave it out"},
		// an empty filter is a script's unset variable too, not the whole
		// journal (it was taken as no filter)
		{"tenant=", "tenant is empty: give one, or leave it out"},
		{"tenant=&flow=echo", "tenant is empty: give one, or leave it out"},
		{"tenant=acme&flow=", "flow is empty: give one, or leave it out"},
		{"flow=", "flow is empty: give one, or leave it out"},
		{"before=12", `before "12" is not a cursor of the journal (next_before of the page before)`},
		{"before=x.1", `before "x.1" is not a cursor of the journal (next_before of the page before)`},
		{"before=1.0", `before "1.0" is not a cursor of the journal (next_before of the page before)`},
	} {
		t.Run("400 for "+tc.query, func(t *testing.T) {
			wantRefusal(t, fx.admin(http.MethodGet, "/api/journal?"+tc.query), http.StatusBadRequest, tc.want)
		})
	}

	t.Run("the default limit is 100", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey})
		var many []registry.Entry
		for i := range 150 {
			many = append(many, registry.Entry{At: t0.Add(time.Duration(i) * time.Second), Door: "run", Tenant: "acme", Flow: "echo",
				Version: 1, CorrelationID: "c-" + strconv.Itoa(i), Attempt: 1, Outcome: "succeeded", Status: 200})
		}
		writeJournal(t, fx.reg, many...)
		got := fx.journal(t, "")
		if len(got) != 100 || got[0].CorrelationID != "c-149" || got[99].CorrelationID != "c-50" {
			t.Errorf("%d entries, first %+v", len(got), got[0])
		}
		if got := fx.journal(t, "limit=150"); len(got) != 150 {
			t.Errorf("limit=150: %d entries", len(got))
		}
	})

	t.Run("no journal on this host", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, noHistory: true})
		wantRefusal(t, fx.admin(http.MethodGet, "/api/journal"), http.StatusNotFound, "this host keeps no journal: no such endpoint: GET /api/journal")
	})
}

// waitJournal polls the journal of tenant/flow until an entry of msgID
// appears: the worker's delivery, written off the hot path.
func (fx *adminFixture) waitJournal(t *testing.T, tenant, flowName string, msgID int64) journalDoc {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, e := range fx.journal(t, "tenant="+tenant+"&flow="+flowName) {
			if e.MsgID == msgID {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no journal entry of message %d of %s/%s: the replayed message was not delivered", msgID, tenant, flowName)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestAPIReplayAndDiscard(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`, `{"n":3}`)
	if got := fx.counts(t, "acme", "echo"); got != (queue.Counts{Total: 3, Processed: 3}) {
		t.Fatalf("the seeded log: %+v", got)
	}

	// the replay appends message 4 and wakes the worker, which runs the flow
	w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/2/replay")
	wantDocument(t, w, `{"tenant":"acme","flow":"echo","id":2,"replayed":true,"message_id":4}`)
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 3}) {
		t.Errorf("pending after the replay: %v, want [1 3]", got)
	}
	e := fx.waitJournal(t, "acme", "echo", 4)
	if e.Door != "enqueue" || e.Attempt != 1 || e.Outcome != "succeeded" || e.Status != 200 || e.Version != 1 {
		t.Errorf("the replayed message's delivery: %+v", e)
	}
	if !uuidV4.MatchString(e.CorrelationID) {
		t.Errorf("the replayed message's correlation ID %q is not a fresh UUID (the original was orig-2)", e.CorrelationID)
	}
	if got := fx.journal(t, "tenant=acme&flow=echo"); len(got) != 1 {
		t.Errorf("journal entries of acme/echo: %+v, want the replayed message's only", got)
	}
	if evs := fx.logs.Events(t, "admin_action"); len(evs) != 1 || evs[0]["action"] != "dlq_replay" || evs[0]["tenant"] != "acme" ||
		evs[0]["flow"] != "echo" || evs[0]["msg_id"] != 2.0 || evs[0]["replay_msg_id"] != 4.0 || evs[0]["auth"] != "bearer" || evs[0]["remote"] == "" {
		t.Errorf("admin_action log lines: %v", evs)
	}

	// the entry is no longer pending: the CLI's text, without the wrapped
	// error's ": no pending dead letter" after it
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/2/replay"), http.StatusNotFound,
		"no pending dead letter id=2 tenant=acme flow=echo")
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/2/discard"), http.StatusNotFound,
		"no pending dead letter id=2 tenant=acme flow=echo")

	for _, tc := range []struct {
		name, path string
		status     int
		msg        string
	}{
		{"an unknown id", "/api/queues/acme/echo/dlq/99/replay", 404, "no pending dead letter id=99 tenant=acme flow=echo"},
		{"an id of the log, not of the dead letters", "/api/queues/acme/echo/dlq/4/discard", 404, "no pending dead letter id=4 tenant=acme flow=echo"},
		{"an id of another queue", "/api/queues/acme/hello/dlq/1/replay", 404, "no pending dead letter id=1 tenant=acme flow=hello"},
		{"id abc", "/api/queues/acme/echo/dlq/abc/replay", 400, `"abc" is not a message id (a whole number from the dead letters' list)`},
		{"id 0", "/api/queues/acme/echo/dlq/0/replay", 400, `"0" is not a message id (a whole number from the dead letters' list)`},
		{"id -1", "/api/queues/acme/echo/dlq/-1/discard", 400, `"-1" is not a message id (a whole number from the dead letters' list)`},
		{"id +1", "/api/queues/acme/echo/dlq/+1/discard", 400, `"+1" is not a message id (a whole number from the dead letters' list)`},
		{"id 2^64", "/api/queues/acme/echo/dlq/18446744073709551616/replay", 400, `"18446744073709551616" is not a message id (a whole number from the dead letters' list)`},
		{"action frobnicate", "/api/queues/acme/echo/dlq/1/frobnicate", 404, `no such action "frobnicate": replay or discard`},
		{"action Replay", "/api/queues/acme/echo/dlq/1/Replay", 404, `no such action "Replay": replay or discard`},
		{"action frobnicate, id abc", "/api/queues/acme/echo/dlq/abc/frobnicate", 404, `no such action "frobnicate": replay or discard`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantRefusal(t, fx.admin(http.MethodPost, tc.path), tc.status, tc.msg)
		})
	}
	if d := dirs(t, fx.root); !slices.Equal(d, []string{"acme", "acme/echo"}) {
		t.Errorf("queue folders: %v, want acme/echo only", d)
	}

	// discard hides the entry at once
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/3/discard"), `{"tenant":"acme","flow":"echo","id":3,"discarded":true}`)
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending after the discard: %v, want [1]", got)
	}
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/3/discard"), http.StatusNotFound,
		"no pending dead letter id=3 tenant=acme flow=echo")
	if evs := fx.logs.Events(t, "admin_action"); len(evs) != 2 || evs[1]["action"] != "dlq_discard" || evs[1]["msg_id"] != 3.0 {
		t.Errorf("admin_action log lines: %v", evs)
	}

	// ids keep counting: the next replay is message 5
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay"), `{"tenant":"acme","flow":"echo","id":1,"replayed":true,"message_id":5}`)
	if got := fx.pendingIDs(t, "acme", "echo"); len(got) != 0 {
		t.Errorf("pending after the last replay: %v, want none", got)
	}
	e5 := fx.waitJournal(t, "acme", "echo", 5)
	if e5.CorrelationID == e.CorrelationID || !uuidV4.MatchString(e5.CorrelationID) {
		t.Errorf("the replays' correlation IDs: %q and %q, want two fresh UUIDs", e.CorrelationID, e5.CorrelationID)
	}
}

func TestAPIReplayTwiceAtOnce(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() { codes[i] = fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay").Code })
	}
	wg.Wait()
	slices.Sort(codes)
	if want := append([]int{200}, slices.Repeat([]int{404}, n-1)...); !slices.Equal(codes, want) {
		t.Errorf("statuses of %d replays of one id at once: %v, want one 200", n, codes)
	}
	fx.waitJournal(t, "acme", "echo", 2)
	if got := fx.journal(t, "tenant=acme&flow=echo"); len(got) != 1 {
		t.Errorf("deliveries: %+v, want one", got)
	}
	if c := fx.counts(t, "acme", "echo"); c.Total > 2 {
		t.Errorf("the log holds %d messages, want the original and one replay at most", c.Total)
	}
}

func TestAPIReplayIntoAFlowNotLive(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`)
	before := fx.counts(t, "acme", "gone")

	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/1/replay"), http.StatusConflict,
		"flow acme/gone is not live: its worker would drop a replayed message; publish the flow first")
	if got := fx.pendingIDs(t, "acme", "gone"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending: %v, want [1]", got)
	}
	if got := fx.counts(t, "acme", "gone"); got != before {
		t.Errorf("the log changed: %+v, then %+v", before, got)
	}
	for _, info := range fx.queues.Queues() {
		if info.Open {
			t.Errorf("a worker was started for %s/%s", info.Tenant, info.Flow)
		}
	}
	// a discard does not need the flow
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/1/discard"), `{"tenant":"acme","flow":"gone","id":1,"discarded":true}`)
}

func TestAPIReplayBeforeTheLiveSetIsLoaded(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey, unloaded: true})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	before := fx.counts(t, "acme", "echo")
	// a nil live set is not a panic (the panic handler's 500) but a flow
	// that is not live
	w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay")
	wantRefusalPrefix(t, w, http.StatusConflict, "flow acme/echo is not live")
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending: %v, want [1]", got)
	}
	if got := fx.counts(t, "acme", "echo"); got != before {
		t.Errorf("the log changed: %+v, then %+v", before, got)
	}
}

func TestAPIReplayWithoutAWorker(t *testing.T) {
	// the budget holds one worker, taken by acme/hello
	fx := newAdminFixture(t, adminOptions{key: adminKey, maxWorkers: 1})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	if _, _, err := fx.queues.Queue("acme", "hello"); err != nil {
		t.Fatal(err)
	}
	before := fx.counts(t, "acme", "echo")
	w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay")
	wantRefusal(t, w, http.StatusServiceUnavailable, "acme/echo: no worker can be started: the residency budget (--max-workers) is spent")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("replay: Retry-After = %q, want 1", got)
	}
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending: %v, want [1]", got)
	}
	if got := fx.counts(t, "acme", "echo"); got != before {
		t.Errorf("the log changed: %+v, then %+v", before, got)
	}
	// a discard needs no worker: it works with the budget spent, and
	// starts none
	w = fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/discard")
	if w.Code != http.StatusOK {
		t.Errorf("discard with the budget spent: %d %s", w.Code, w.Body)
	}
	if got := fx.pendingIDs(t, "acme", "echo"); len(got) != 0 {
		t.Errorf("pending after the discard: %v", got)
	}
	if info, ok := fx.queues.Info("acme", "echo"); !ok || info.Open {
		t.Errorf("after the discard the queue is %+v (%v): want it on disk, no worker started", info, ok)
	}
}

// A payload over the preview's 4 KiB is cut in the listing (on a
// character's boundary for text) and whole in its download.
func TestAPIDeadLetterPreview(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	long := `{"text":"` + strings.Repeat("é", 3000) + `"}` // 6011 bytes, é is 2 bytes
	seedDeadLetters(t, fx.root, "acme", "echo", long, "\xff"+strings.Repeat("b", 5000))
	var doc struct {
		DeadLetters []struct {
			ID            uint64  `json:"id"`
			Payload       *string `json:"payload"`
			PayloadBase64 string  `json:"payload_base64"`
			PayloadBytes  int     `json:"payload_bytes"`
			Truncated     bool    `json:"truncated"`
		} `json:"dead_letters"`
	}
	w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq")
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.DeadLetters) != 2 {
		t.Fatalf("%d %.300s: %v", w.Code, w.Body, err)
	}
	text := doc.DeadLetters[0]
	if text.Payload == nil || !text.Truncated || text.PayloadBytes != len(long) || !strings.HasPrefix(long, *text.Payload) ||
		len(*text.Payload) != 4095 || !utf8.ValidString(*text.Payload) {
		t.Errorf("the long text: truncated %v, %d bytes of %d, valid UTF-8 %v", text.Truncated, len(deref(text.Payload)), text.PayloadBytes, utf8.ValidString(deref(text.Payload)))
	}
	bin := doc.DeadLetters[1]
	raw, err := base64.StdEncoding.DecodeString(bin.PayloadBase64)
	if err != nil || !bin.Truncated || bin.PayloadBytes != 5001 || len(raw) != 4096 || bin.Payload != nil {
		t.Errorf("the long binary: truncated %v, %d bytes of %d (%v)", bin.Truncated, len(raw), bin.PayloadBytes, err)
	}
	if w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq/1/payload"); w.Body.String() != long {
		t.Errorf("the download of 1 is %d bytes, want the %d of the payload", w.Body.Len(), len(long))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestAPIInternalErrorLogsCorrelationID: a 500 of the API says only
// "internal error"; its log line carries the request's correlation ID, the
// one the answer names, so that an operator can find the cause.
func TestAPIInternalErrorLogsCorrelationID(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.cfg.Journal.(*registry.JournalWriter).Stop()
	fx.reg.Close() // every read of the registry fails
	r := newRequest(http.MethodGet, "/api/journal", "", bearerAdmin...)
	r.Header.Set("X-Correlation-ID", "trace-api-500")
	w := fx.serve(r)
	if w.Code != http.StatusInternalServerError || w.Header().Get("X-Correlation-Id") != "trace-api-500" {
		t.Fatalf("GET /api/journal over a closed registry: %d %q %s", w.Code, w.Header().Get("X-Correlation-Id"), w.Body)
	}
	evs := fx.logs.Events(t, "internal_error")
	if len(evs) != 1 || evs[0]["correlation_id"] != "trace-api-500" {
		t.Errorf("internal_error events %v, want one with correlation_id trace-api-500", evs)
	}
}

// TestAPIUnknownPathsNeedTheKey: with an admin key, a path under /api/ that
// no endpoint takes answers as the API does: 401 without the key (which
// paths exist is not told before it), and 404 or 405 with it; every one
// with Cache-Control: no-store.
func TestAPIUnknownPathsNeedTheKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, tc := range []struct {
		method, path string
		status       int // with the key
	}{
		{http.MethodGet, "/api/nope", http.StatusNotFound},
		{http.MethodGet, "/api/queues/acme/echo/dlq/1/replay", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/api/flows", http.StatusMethodNotAllowed},
	} {
		w := fx.serve(newRequest(tc.method, tc.path, ""))
		wantRefusal(t, w, http.StatusUnauthorized, "missing or unknown admin key")
		if w.Header().Get("WWW-Authenticate") != "Bearer" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Allow") != "" {
			t.Errorf("%s %s without the key: headers %v (an Allow would tell the path exists)", tc.method, tc.path, w.Header())
		}
		w = fx.admin(tc.method, tc.path)
		if w.Code != tc.status || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s with the key: %d, Cache-Control %q; want %d and no-store", tc.method, tc.path, w.Code, w.Header().Get("Cache-Control"), tc.status)
		}
	}
	// a POST with a body, to an endpoint or to no endpoint, under /api/
	// and /ui/: the same headers without the key
	var answers []http.Header
	for _, path := range []string{"/api/queues/acme/echo/dlq/1/replay", "/api/nope", "/ui/queues/acme/echo/dlq/1/replay", "/ui/nope"} {
		h := fx.serve(newRequest(http.MethodPost, path, "csrf=x", "Content-Type", "application/x-www-form-urlencoded")).Header()
		answers = append(answers, http.Header{"Allow": h["Allow"], "Connection": h["Connection"]})
	}
	if want := (http.Header{"Allow": nil, "Connection": {"close"}}); !slices.EqualFunc(answers, slices.Repeat([]http.Header{want}, 4), func(a, b http.Header) bool { return cmp.Equal(a, b) }) {
		t.Errorf("POSTs without the key: %v, want each %v", answers, want)
	}
}

// TestAPIReplayAllLeavesAnOversizedDeadLetter: a dead letter whose payload
// is over queue.MaxPayload (an older nexus wrote it) cannot be replayed:
// the replay of all replays the others, leaves it pending and names it
// under "skipped" with a dlq_replay_skipped line; a replay of it alone is
// a 409 naming the limit. The replay of all answered 500 "internal error"
// and replayed none: the error of the chunk dropped the ones before it.
func TestAPIReplayAllLeavesAnOversizedDeadLetter(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedQueue(t, fx.root, "acme", "echo", func() time.Time { return t0 }, func(q *queue.Queue) {
		msgs := appendMessages(t, q, `{"n":1}`, `{"n":2}`, `{"n":3}`)
		processed(t, q, msgs, len(msgs))
		msgs[1].Payload = bytes.Repeat([]byte("x"), queue.MaxPayload+1)
		for _, m := range msgs {
			deadLetter(t, q, m, t0.Add(time.Minute), 3, "step call: 502 from upstream")
		}
	})
	tooLarge := fmt.Sprintf("queue acme/echo: dead letter 2 cannot be replayed: the message is too large for a frame: its payload of %d bytes is over the limit of %d bytes a message may have",
		queue.MaxPayload+1, queue.MaxPayload)
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/replay"), `{"tenant":"acme","flow":"echo","replayed":[`+
		`{"tenant":"acme","flow":"echo","id":1,"replayed":true,"message_id":4},`+
		`{"tenant":"acme","flow":"echo","id":3,"replayed":true,"message_id":5}],`+
		fmt.Sprintf(`"skipped":[{"id":2,"payload_size":%d,"error":%q}]}`, queue.MaxPayload+1, tooLarge))
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{2}) {
		t.Errorf("pending after replaying all: %v, want [2]", got)
	}
	if evs := fx.logs.Events(t, "dlq_replay_skipped"); len(evs) != 1 || evs[0]["msg_id"] != 2.0 || evs[0]["error"] != tooLarge {
		t.Errorf("dlq_replay_skipped lines: %v, want one naming dead letter 2", evs)
	}
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/2/replay"), http.StatusConflict, tooLarge)
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{2}) {
		t.Errorf("pending after replaying it alone: %v, want [2]", got)
	}
}

// TestAPIReplayAndDiscardAll: the id "all" replays or discards every dead
// letter pending in the queue, oldest first, as one request each would
// (the answer lists what was done); a queue with none answers an empty
// list, and a replay into a flow that is not live is refused before any.
func TestAPIReplayAndDiscardAll(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`, `{"n":3}`)
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/replay"), `{"tenant":"acme","flow":"echo","replayed":[`+
		`{"tenant":"acme","flow":"echo","id":1,"replayed":true,"message_id":4},`+
		`{"tenant":"acme","flow":"echo","id":2,"replayed":true,"message_id":5},`+
		`{"tenant":"acme","flow":"echo","id":3,"replayed":true,"message_id":6}]}`)
	if got := fx.pendingIDs(t, "acme", "echo"); len(got) != 0 {
		t.Errorf("pending after replaying all: %v", got)
	}
	for id := int64(4); id <= 6; id++ {
		fx.waitJournal(t, "acme", "echo", id)
	}
	if evs := fx.logs.Events(t, "admin_action"); len(evs) != 1 || evs[0]["action"] != "dlq_replay_all" || evs[0]["count"] != 3.0 ||
		evs[0]["first_msg_id"] != 1.0 || evs[0]["last_msg_id"] != 3.0 || evs[0]["auth"] != "bearer" {
		t.Errorf("admin_action lines: %v, want one naming the three", evs)
	}
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/discard"), `{"tenant":"acme","flow":"echo","discarded":[]}`)
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/frobnicate"), http.StatusNotFound, `no such action "frobnicate": replay or discard`)

	// a flow not live with nothing pending: nothing to replay, said as
	// nothing (as nexus dlq replay --all says it), not 409
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/all/replay"), `{"tenant":"acme","flow":"gone","replayed":[]}`)
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`, `{"n":2}`)
	wantRefusal(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/all/replay"), http.StatusConflict,
		"flow acme/gone is not live: its worker would drop a replayed message; publish the flow first")
	if got := fx.pendingIDs(t, "acme", "gone"); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("pending in acme/gone after the refused replay: %v", got)
	}
	wantDocument(t, fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/all/discard"), `{"tenant":"acme","flow":"gone","discarded":[1,2]}`)
	if got := fx.pendingIDs(t, "acme", "gone"); len(got) != 0 {
		t.Errorf("pending in acme/gone after discarding all: %v", got)
	}
}
