package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// kill -9 during a deploy: the reliability test plan's "the active flow set
// is exactly the old commit or the new one".

// deployKillFlow answers which flow it is, from which set (A or B) and
// from which deploy (the commit's number), so that every answer names the
// one commit it came from.
const deployKillFlow = `---
flowmarkdown_version: "0.1"
flow: NAME
tenant: acme
---

## Step: answer
` + "```ntd" + `
{"flow": "NAME", "set": "SET", "deploy": "DEPLOY"}
` + "```" + `
`

// The two flow sets: A is f001…f120, B is f061…f180. From one to the
// other, 60 flows are withdrawn, 60 added and 60 changed; and since every
// answer names its deploy, every flow of the new set is a new version.
const (
	deploySetSize = 120
	deployShift   = 60
	deployNames   = deploySetSize + deployShift
)

// deployCommit is one commit of the config repo of TestDeployKill….
type deployCommit struct {
	hash   string
	set    string // "A" or "B"
	deploy int    // its number, counted from 0
}

func (c deployCommit) String() string {
	return fmt.Sprintf("%.12s (set %s, deploy %d)", c.hash, c.set, c.deploy)
}

// flows returns the names of the commit's flows, sorted.
func (c deployCommit) flows() []string {
	lo := 1
	if c.set == "B" {
		lo += deployShift
	}
	out := make([]string, 0, deploySetSize)
	for i := lo; i < lo+deploySetSize; i++ {
		out = append(out, deployFlowName(i))
	}
	return out
}

// answer is what the commit's flow name answers on /run.
func (c deployCommit) answer(name string) deployAnswer {
	return deployAnswer{Flow: name, Set: c.set, Deploy: strconv.Itoa(c.deploy)}
}

func deployFlowName(i int) string { return fmt.Sprintf("f%03d", i) }

// deployFiles are the files of a commit of set (A or B) numbered deploy:
// its flows written, the other set's deleted.
func deployFiles(set string, deploy int) map[string]string {
	c := deployCommit{set: set, deploy: deploy}
	files := map[string]string{}
	for i := 1; i <= deployNames; i++ {
		files["flows/acme/"+deployFlowName(i)+".md"] = "" // deleted unless in the set
	}
	for _, name := range c.flows() {
		files["flows/acme/"+name+".md"] = strings.NewReplacer("NAME", name, "SET", set, "DEPLOY", strconv.Itoa(deploy)).Replace(deployKillFlow)
	}
	return files
}

// deployAnswer is a /run answer of a deployKillFlow.
type deployAnswer struct {
	Flow   string `json:"flow"`
	Set    string `json:"set"`
	Deploy string `json:"deploy"`
}

// deployView is what a state directory deploys, as nexus status --db and
// a host started on it without --repo show it.
type deployView struct {
	statusCommit string            // GET /status: the live set's commit
	statusFlows  int               // GET /status: the registry's latest flows
	cliCommit    string            // nexus status --db: the registry's commit
	cliFlows     []string          // nexus status --db: its flow: lines
	apiCommit    string            // GET /api/flows: the live set's commit
	apiFlows     map[string]string // GET /api/flows: flow → the commit of its version
	doors        map[string]string // flow name → its /run answer: "A#7", or "404", or what else it said
}

// TestDeployKillNineLeavesOneCommit kills nexus serve with SIGKILL while it
// deploys a new commit, cycle after cycle, and checks that the state the
// kill left holds exactly the old commit's flow set or exactly the new
// one's, never a mix.
//
// The config repo alternates between two sets of 120 flows (A: f001…f120,
// B: f061…f180; each answers its name, its set and the number of its
// commit), so every deploy publishes 120 new versions and withdraws 60
// flows in one publication. A cycle starts nexus serve (--poll 100ms) on
// the state directory, waits until it serves the repo's head, commits the
// other set (moves main to that commit, made before the cycles by
// deployCommits), and kills the process -9: either at a random moment
// 0–300 ms after the commit, or (every third cycle) 0–40 ms after the process's
// clone of the repo shows the new commit, that is while the sync compiles
// and publishes it (gitsync logs no event when a sync starts: the clone's
// ref, which the fetch writes before compiling, is the signal; the 40 ms,
// about twice the deploy on an idle 2-core machine, grow when the kills
// keep landing near its end).
//
// The state the kill left is observed before any sync can change it: with
// `nexus status --db` (the registry, read directly: its commit and its
// latest flows), then by a nexus serve started on the state directory
// without --repo, so that it never syncs and serves what the registry
// holds: its /status and /api/flows, and the /run door of each of the 180
// flow names. The commit reported must be the old or the new one, the flows
// listed and those answering must be exactly that commit's, and every
// answer must be that commit's; a flow of the other set must answer 404.
//
// Where the kill landed is read from the same state: "after" when the
// registry holds the new commit (its publication committed before the
// kill), "during" when it holds the old commit but the clone already had
// the new one (the kill came after the fetch, while the sync compiled or
// published it), "before" otherwise. Each must happen at least 3 times, so
// that the test cannot pass without killing deploys in flight. The next
// cycle's server must then deploy the head again from that state, and no
// process may log a failed sync, a live set that did not load, or a fatal
// error.
//
// All 100 cycles of the test plan run: about 40 s on an idle 2-core machine
// under go test -race (the binary itself is built without -race), the
// process starts and the deploys taking most of it. -short runs 40 and
// asks for one kill in each place.
func TestDeployKillNineLeavesOneCommit(t *testing.T) {
	t.Parallel()
	cycles, atLeast := figure(100, 40, 1000), figure(3, 1, 30)
	seed := uint64(time.Now().UnixNano())
	rnd := rand.New(rand.NewPCG(seed, 0x6465706c6f79))
	t.Logf("seed %d", seed)

	files := deployFiles("A", 0)
	access := accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})
	files["access.yaml"] = access
	repo := newConfigRepo(t, files)
	head := deployCommit{hash: repo.git("rev-parse", "HEAD"), set: "A", deploy: 0}
	commits := map[string]deployCommit{head.hash: head}
	prepared := deployCommits(t, repo, head, access, cycles)
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	clonedRef := filepath.Join(filepath.Dir(db), "repo", "refs", "remotes", "origin", "main")

	var before, during, after, unlogged, repaired int
	// the window of the kills at the fetch grows when they keep landing in
	// the deploy near its end: a slower machine deploys for longer
	fetchWindow := 40 * time.Millisecond
	began := time.Now()
	for c := 1; c <= cycles; c++ {
		ok := t.Run(fmt.Sprintf("cycle-%03d", c), func(t *testing.T) {
			old := head
			h := startDeployHost(t, repo.dir, db)
			h.waitCommit(old.hash, 10*time.Second)

			next := prepared[c-1]
			repo.git("update-ref", "refs/heads/main", next.hash, old.hash)
			committed := time.Now()
			commits[next.hash], head = next, next
			atFetch := c%3 == 0
			var how string
			var d time.Duration
			if atFetch {
				// generous: a round that repacks the clone (every 16
				// fetches) holds the next one up for the repack, 1.7 s for
				// this repo's 90 commits of 120 flows on a quiet machine,
				// and a loaded CI machine is several times slower
				deadline := time.Now().Add(20 * time.Second)
				for deployReadRef(clonedRef) != next.hash {
					if time.Now().After(deadline) {
						t.Fatalf("cycle %d: the clone's %s does not show the new commit %v within 20 s of the commit (it holds %q)", c, clonedRef, next, deployReadRef(clonedRef))
					}
					time.Sleep(200 * time.Microsecond)
				}
				fetched := time.Since(committed)
				d = time.Duration(rnd.Int64N(int64(fetchWindow)))
				time.Sleep(d)
				how = fmt.Sprintf("%v after the clone showed the new commit (%v after the commit)", d.Round(time.Microsecond), fetched.Round(time.Millisecond))
			} else {
				d = time.Duration(rnd.IntN(300_000)) * time.Microsecond
				time.Sleep(time.Until(committed.Add(d)))
				how = fmt.Sprintf("%v after the commit", d.Round(time.Microsecond))
			}
			h.kill()
			cloned := deployReadRef(clonedRef)
			deployLogErrors(t, c, "the killed process", h)
			for _, e := range h.events("sync_repaired") {
				// a kill during a fetch can leave an empty ref file in the clone
				t.Logf("cycle %d: the process repaired the clone the last kill left: %v", c, e)
				repaired++
			}

			v := observeDeploy(t, db)
			got, known := commits[v.cliCommit]
			if !known || got.hash != old.hash && got.hash != next.hash {
				t.Fatalf("cycle %d, killed %s: the registry holds commit %q, neither the old %v nor the new %v", c, how, v.cliCommit, old, next)
			}
			checkDeployView(t, c, how, v, got, old, next)

			var where string
			switch {
			case got.hash == next.hash:
				after++
				where = "after: the new commit was published"
				if len(h.eventsFor("sync_applied", next.hash)) == 0 {
					unlogged++
					where += ", sync_applied not logged"
				}
			case cloned == next.hash:
				during++
				where = "during: the new commit was fetched, not published"
				if atFetch && d > fetchWindow*3/4 {
					fetchWindow = min(fetchWindow*3/2, time.Second)
				}
			default:
				before++
				where = "before: the new commit was not fetched"
			}
			t.Logf("killed %s: %s; the state holds exactly %v", how, where, got)
		})
		if !ok {
			break
		}
	}
	t.Logf("%d cycles in %v: the kill left the old commit %d times before its sync had fetched the new one, %d times while the sync compiled or published it, and the new commit %d times (%d of them without sync_applied in the log: killed between the publication and the log line, or the line lost with the log's last 2 ms); the kills at the fetch came within %v of it; %d sync_repaired events",
		before+during+after, time.Since(began).Round(time.Millisecond), before, during, after, unlogged, fetchWindow, repaired)
	if t.Failed() {
		return
	}
	if before < atLeast || during < atLeast || after < atLeast {
		t.Errorf("the kills landed %d times before the deploy, %d during, %d after: want at least %d of each, or the test proves nothing", before, during, after, atLeast)
	}
}

// deployCommits makes the commits of cycles 1…n, each on the one before
// and the first on head: cycle c's holds the other set than cycle c-1's,
// numbered c, and access.yaml. One git fast-import writes them all, where
// a git add and commit of the 180 files took 0.3–0.9 s a cycle; no ref
// points at them, so nexus sees none until a cycle moves main to its own
// (git update-ref: the cycle's commit, at once).
func deployCommits(t *testing.T, repo *configRepo, head deployCommit, access string, n int) []deployCommit {
	t.Helper()
	const ref = "refs/nexus-test/deploys"
	var stream bytes.Buffer
	data := func(s string) { fmt.Fprintf(&stream, "data %d\n%s\n", len(s), s) }
	out := make([]deployCommit, n)
	set := head.set
	for c := 1; c <= n; c++ {
		set = map[string]string{"A": "B", "B": "A"}[set]
		out[c-1] = deployCommit{set: set, deploy: c}
		fmt.Fprintf(&stream, "commit %s\nmark :%d\ncommitter test <test@localhost> now\n", ref, c)
		data("change")
		if c == 1 {
			fmt.Fprintf(&stream, "from %s\n", head.hash)
		}
		stream.WriteString("deleteall\nM 100644 inline access.yaml\n")
		data(access)
		files := deployFiles(set, c)
		for _, name := range out[c-1].flows() {
			fmt.Fprintf(&stream, "M 100644 inline flows/acme/%s.md\n", name)
			data(files["flows/acme/"+name+".md"])
		}
		stream.WriteString("\n")
	}
	marks := filepath.Join(t.TempDir(), "marks")
	repo.gitStdin(&stream, "fast-import", "--quiet", "--date-format=now", "--export-marks="+marks)
	repo.git("update-ref", "-d", ref)
	b, err := os.ReadFile(marks)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c int
		var hash string
		if _, err := fmt.Sscanf(line, ":%d %s", &c, &hash); err != nil || c < 1 || c > n {
			t.Fatalf("git fast-import's marks: %q", line)
		}
		out[c-1].hash = hash
	}
	for _, c := range out {
		if c.hash == "" {
			t.Fatalf("git fast-import left %v without a hash", c)
		}
	}
	return out
}

// startDeployHost starts nexus serve on db with --poll 100ms, syncing repo
// (none when repo is ""), and keeps its log without the run_completed lines.
func startDeployHost(t *testing.T, repo, db string) *hostProc {
	t.Helper()
	const admin = "admin-test-key"
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", admin, "--poll", "100ms"}
	if repo != "" {
		args = append(args, "--repo", repo)
	}
	h := &hostProc{t: t, db: db, adminKey: admin, exited: make(chan struct{})}
	h.cmd = exec.Command(nexusBinary(), args...)
	h.cmd.Env = append(os.Environ(), "NEXUS_LOG_FORMAT=json")
	h.watch(args, func(event string) bool { return event != "run_completed" }, nil)
	return h
}

// eventsFor returns the events named event whose commit is commit.
func (h *hostProc) eventsFor(event, commit string) []map[string]any {
	var out []map[string]any
	for _, e := range h.events(event) {
		if e["commit"] == commit {
			out = append(out, e)
		}
	}
	return out
}

// deployLogErrors fails the test for each error event in h's log: a sync
// that could not run or refused a commit, a live set that did not load, a
// fatal error.
func deployLogErrors(t *testing.T, cycle int, who string, h *hostProc) {
	t.Helper()
	for _, event := range []string{"sync_failed", "sync_unreachable", "sync_error", "live_set_refresh_failed", "internal_error", "fatal"} {
		for _, e := range h.events(event) {
			if cycle > 0 {
				t.Errorf("cycle %d: %s logged %v", cycle, who, e)
			} else {
				t.Errorf("%s logged %v", who, e)
			}
		}
	}
}

// deployReadRef returns the hash a loose ref file holds ("" when it is missing).
func deployReadRef(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// observeDeploy reads what the state directory of db deploys without
// changing it: nexus status --db, then a nexus serve without --repo (it
// never syncs), whose /status, /api/flows and /run doors it reads.
func observeDeploy(t *testing.T, db string) deployView {
	t.Helper()
	v := deployView{apiFlows: map[string]string{}, doors: map[string]string{}}
	st := nexus(t, "", "status", "--db", db)
	if st.code != 0 {
		t.Fatalf("nexus status --db: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
	for _, line := range strings.Split(st.stdout, "\n") {
		if c, ok := strings.CutPrefix(line, "commit: "); ok {
			v.cliCommit = c
		}
		if f, ok := strings.CutPrefix(line, "flow: "); ok {
			v.cliFlows = append(v.cliFlows, f)
		}
	}

	h := startDeployHost(t, "", db)
	defer h.kill()
	var status struct {
		Commit string `json:"commit"`
		Flows  int    `json:"flows"`
	}
	if r := h.do(http.MethodGet, "/status", h.adminKey, "", ""); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &status) != nil {
		t.Fatalf("GET /status: %d %s", r.status, r.body)
	}
	v.statusCommit, v.statusFlows = status.Commit, status.Flows
	var api struct {
		Commit string `json:"commit"`
		Flows  []struct {
			Tenant, Flow, Commit, Corrupt string
		} `json:"flows"`
	}
	if r := h.do(http.MethodGet, "/api/flows", h.adminKey, "", ""); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &api) != nil {
		t.Fatalf("GET /api/flows: %d %s", r.status, r.body)
	}
	v.apiCommit = api.Commit
	for _, f := range api.Flows {
		v.apiFlows[f.Tenant+"/"+f.Flow] = f.Commit + f.Corrupt
	}
	defer deployLogErrors(t, 0, "the process started without --repo", h)
	// the doors, 8 at a time
	answers := make([]string, deployNames+1)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				answers[i] = runDeployFlow(h.url, deployFlowName(i))
			}
		})
	}
	for i := 1; i <= deployNames; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	for i := 1; i <= deployNames; i++ {
		v.doors[deployFlowName(i)] = answers[i]
	}
	return v
}

// runDeployFlow calls the /run door of acme/name at baseURL and returns
// "SET#DEPLOY" for a deployKillFlow's answer, "404" for no such flow, and
// what it got otherwise.
func runDeployFlow(baseURL, name string) string {
	req, err := http.NewRequest(http.MethodPost, baseURL+"/flows/acme/"+name+"/run", strings.NewReader(`{}`))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var a deployAnswer
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "404"
	case resp.StatusCode == http.StatusOK && json.Unmarshal(body, &a) == nil && a.Flow == name:
		return a.Set + "#" + a.Deploy
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

// checkDeployView checks that v is exactly what commit got deploys (old or
// next, the commits before and after the deploy the kill interrupted).
func checkDeployView(t *testing.T, cycle int, how string, v deployView, got, old, next deployCommit) {
	t.Helper()
	which := "the old commit " + old.String()
	if got.hash == next.hash {
		which = "the new commit " + next.String()
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("cycle %d, killed %s; the registry holds %s, but %s", cycle, how, which, fmt.Sprintf(format, args...))
	}
	want := got.flows()
	var wantCLI []string
	for _, name := range want {
		wantCLI = append(wantCLI, "acme/"+name)
	}
	var cli []string
	for _, f := range v.cliFlows {
		cli = append(cli, strings.Fields(f)[0])
	}
	if d := deploySetDiff(wantCLI, cli); d != "" {
		fail("nexus status lists other flows: %s", d)
	}
	if v.statusCommit != got.hash || v.apiCommit != got.hash {
		fail("the host started on its state serves commit %q (/status) and %q (/api/flows)", v.statusCommit, v.apiCommit)
	}
	if v.statusFlows != len(want) {
		fail("/status counts %d flows, want %d", v.statusFlows, len(want))
	}
	var api, otherCommit []string
	for name, commit := range v.apiFlows {
		api = append(api, name)
		if commit != got.hash {
			otherCommit = append(otherCommit, fmt.Sprintf("%s of %.12s", name, commit))
		}
	}
	if len(otherCommit) > 0 {
		sort.Strings(otherCommit)
		fail("/api/flows shows %d flows of another commit, e.g. %s", len(otherCommit), strings.Join(otherCommit[:min(5, len(otherCommit))], ", "))
	}
	if d := deploySetDiff(wantCLI, api); d != "" {
		fail("/api/flows lists other flows: %s", d)
	}

	// the doors: every flow name answers the commit's answer, or 404
	label := map[string]string{
		old.set + "#" + strconv.Itoa(old.deploy):   "the old commit",
		next.set + "#" + strconv.Itoa(next.deploy): "the new commit",
		"404": "404",
	}
	wantDoor := map[string]string{}
	for i := 1; i <= deployNames; i++ {
		wantDoor[deployFlowName(i)] = "404"
	}
	for _, name := range want {
		a := got.answer(name)
		wantDoor[name] = a.Set + "#" + a.Deploy
	}
	counts := map[string]int{}
	var wrong []string
	for i := 1; i <= deployNames; i++ {
		name := deployFlowName(i)
		ans := v.doors[name]
		l, ok := label[ans]
		if !ok {
			l = ans
		}
		counts[l]++
		if ans != wantDoor[name] {
			wrong = append(wrong, fmt.Sprintf("%s answered %s, want %s", name, ans, wantDoor[name]))
		}
	}
	if len(wrong) > 0 {
		fail("%d of the %d doors answered otherwise (answers by origin: %v); first: %s", len(wrong), deployNames, counts, strings.Join(wrong[:min(5, len(wrong))], "; "))
	}
}

// deploySetDiff describes how got differs from want ("" when they hold
// the same names).
func deploySetDiff(want, got []string) string {
	in := map[string]int{}
	for _, w := range want {
		in[w] |= 1
	}
	for _, g := range got {
		in[g] |= 2
	}
	var missing, extra []string
	for name, m := range in {
		switch m {
		case 1:
			missing = append(missing, name)
		case 2:
			extra = append(extra, name)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("%d missing %v, %d more %v", len(missing), missing[:min(5, len(missing))], len(extra), extra[:min(5, len(extra))])
}
