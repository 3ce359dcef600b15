package queue

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// frameLen is the length of m's frame in the log.
func frameLen(m Message) int64 {
	return headerSize + 20 + int64(len(m.Source)+len(m.CorrelationID)+len(m.Payload))
}

// sentIndex is the index i of newMessage(i, …) that m was built from.
func sentIndex(t testing.TB, m Message) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(m.CorrelationID, "corr-"))
	if err != nil {
		t.Fatalf("message %d: correlation ID %q was not sent by the test", m.ID, m.CorrelationID)
	}
	return i
}

// checkLog reads q's whole log and checks it against the acknowledged
// messages: ids 1..len(acked), each acknowledged message delivered as
// acknowledged, frames back to back in id order up to the end of the file.
func checkLog(t *testing.T, q *Queue, acked []Message) {
	t.Helper()
	acked = slices.Clone(acked)
	slices.SortFunc(acked, func(a, b Message) int { return int(a.ID) - int(b.ID) })
	for i, m := range acked {
		if m.ID != uint64(i+1) {
			t.Fatalf("acknowledged ids are not 1..%d: %d at position %d", len(acked), m.ID, i)
		}
	}
	got := readAll(t, q)
	checkMessages(t, got, acked)
	end := int64(0)
	for _, m := range got {
		if m.Offset != end {
			t.Errorf("id %d at offset %d, want %d: frames out of file order or not back to back", m.ID, m.Offset, end)
		}
		end = m.Offset + frameLen(m)
	}
	if size, _ := q.Size(); size != end {
		t.Errorf("the log is %d bytes, its frames end at %d", size, end)
	}
}

// TestAppendConcurrent: 64 goroutines append 200 messages each.
func TestAppendConcurrent(t *testing.T) {
	const callers = 64
	per := figure(200, 20, 2000)
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	var mu sync.Mutex
	var acked []Message
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range per {
				idx := g*per + i
				m, err := q.Append(newMessage(idx, 30+idx%70))
				if err != nil {
					t.Error(err)
					return
				}
				if d := sameMessage(m, Message{ID: m.ID, Offset: m.Offset, EnqueuedAt: m.EnqueuedAt,
					Source: "enqueue", CorrelationID: fmt.Sprintf("corr-%d", idx), Payload: payload(idx, 30+idx%70)}); d != "" {
					t.Error(d)
				}
				mu.Lock()
				acked = append(acked, m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	checkLog(t, q, acked)
	for _, m := range acked[:100] {
		got, next, err := q.Read(m.Offset)
		if err != nil || next != m.Offset+frameLen(m) || sameMessage(got, m) != "" {
			t.Errorf("Read(%d) = %v, %d, %v; want id %d", m.Offset, got.ID, next, err, m.ID)
		}
	}
	q.Close()
	q, damage := openQueue(t, root, Options{})
	if len(damage) != 0 {
		t.Errorf("reopening found %v", damage)
	}
	checkLog(t, q, acked)
}

// The helper process's settings: the root it appends to, and the index of
// its first message (see appendFrom).
const (
	helperRootEnv = "NEXUS_QUEUE_HELPER_ROOT"
	helperFromEnv = "NEXUS_QUEUE_HELPER_FROM"
)

// TestHelperProcessAppend is one of the other processes of
// TestAppendThreeProcesses: it prints "ready", waits for a line on its
// standard input, appends appendsPerProcess messages from appenders
// goroutines and prints "acked id offset index" for each.
func TestHelperProcessAppend(t *testing.T) {
	root := os.Getenv(helperRootEnv)
	if root == "" {
		t.Skip("another process of TestAppendThreeProcesses")
	}
	from, err := strconv.Atoi(os.Getenv(helperFromEnv))
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	fmt.Fprintln(out, "ready")
	out.Flush()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	appendFrom(q, from, func(m Message, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(out, "acked %d %d %d\n", m.ID, m.Offset, sentIndex(t, m))
	})
	out.Flush()
}

// Each process of TestAppendThreeProcesses appends from appenders
// goroutines at once, appendsPerProcess messages in all.
const (
	appenders         = 32
	appendsPerProcess = appenders * 16
)

// appendFrom appends messages from+0 … from+appendsPerProcess-1 from
// appenders goroutines.
func appendFrom(q *Queue, from int, done func(Message, error)) {
	var wg sync.WaitGroup
	per := appendsPerProcess / appenders
	for g := range appenders {
		wg.Go(func() {
			for i := range per {
				done(q.Append(newMessage(from+g*per+i, 60)))
			}
		})
	}
	wg.Wait()
}

// appendProcess is another process of TestAppendThreeProcesses.
type appendProcess struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	ready   chan struct{}
	scanned chan struct{} // closed when its output ends
	lines   []string
	acked   []Message
}

// startAppendProcess starts a process that appends to root's queue from
// message index from on, once go is called.
func startAppendProcess(t *testing.T, root string, from int) *appendProcess {
	p := &appendProcess{ready: make(chan struct{}), scanned: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcessAppend$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), helperRootEnv+"="+root, helperFromEnv+"="+strconv.Itoa(from))
	p.cmd.Stderr = os.Stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	go func() {
		defer close(p.scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.lines = append(p.lines, line)
			var m Message
			var idx int
			if line == "ready" {
				close(p.ready)
			} else if _, err := fmt.Sscanf(line, "acked %d %d %d", &m.ID, &m.Offset, &idx); err == nil {
				nm := newMessage(idx, 60)
				m.Source, m.CorrelationID, m.Payload = nm.Source, nm.CorrelationID, nm.Payload
				p.acked = append(p.acked, m)
			}
		}
	}()
	select {
	case <-p.ready:
	case <-p.scanned:
		t.Fatalf("the process appending from %d did not start: %v", from, p.lines)
	case <-time.After(time.Minute):
		t.Fatalf("the process appending from %d did not get ready", from)
	}
	return p
}

// TestAppendThreeProcesses: this process and two others append 512
// messages each, from 32 goroutines each, to the same queue at the same
// time (RELIABILITY F.27): every acknowledged message is in the log as
// acknowledged, the frames are back to back with ids 1…1,536, and
// reopening finds no damage.
func TestAppendThreeProcesses(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	others := []*appendProcess{startAppendProcess(t, root, 10000), startAppendProcess(t, root, 20000)}
	for _, p := range others {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var ours []Message
	appendFrom(q, 0, func(m Message, err error) {
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		ours = append(ours, m)
		mu.Unlock()
	})
	all := ours
	for _, p := range others {
		<-p.scanned
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("the process appending from %s: %v\n%s", p.cmd.Env[len(p.cmd.Env)-1], err, strings.Join(p.lines, "\n"))
		}
		all = append(all, p.acked...)
	}
	if len(ours) != appendsPerProcess || len(others[0].acked) != appendsPerProcess || len(others[1].acked) != appendsPerProcess {
		t.Fatalf("acknowledged %d, %d and %d, want %d each", len(ours), len(others[0].acked), len(others[1].acked), appendsPerProcess)
	}

	// the other processes' messages carry their clocks: take EnqueuedAt from the log
	got := readAll(t, q)
	byID := map[uint64]Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	for i, m := range all {
		all[i].EnqueuedAt = byID[m.ID].EnqueuedAt
	}
	switches := 0 // from one process's frames to another's
	for i := 1; i < len(got); i++ {
		if sentIndex(t, got[i])/10000 != sentIndex(t, got[i-1])/10000 {
			switches++
		}
	}
	t.Logf("the three processes' frames alternate %d times in the log", switches)
	checkLog(t, q, all)
	q.Close()
	if _, damage := openQueue(t, root, Options{}); len(damage) != 0 {
		t.Errorf("reopening found %v", damage)
	}
}

// TestAppendGroupCommit: 64 concurrent appends share few fdatasyncs when
// each takes 5 ms, and OnCommit reports every message once.
func TestAppendGroupCommit(t *testing.T) {
	m, root := memQueueRoot(t)
	m.syncDelay = 5 * time.Millisecond
	var commits []int // OnCommit's messages, one per call
	var commitMu sync.Mutex
	onCommit := func(messages int, sync time.Duration) {
		if sync < m.syncDelay {
			t.Errorf("OnCommit: the fdatasync took %v, less than the file system's %v", sync, m.syncDelay)
		}
		commitMu.Lock()
		commits = append(commits, messages)
		commitMu.Unlock()
	}
	q, _ := openQueue(t, root, Options{FS: m, OnCommit: onCommit})
	before := m.Count(opSync)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []Message
	for i := range 64 {
		wg.Go(func() {
			<-start
			msg, err := q.Append(newMessage(i, 50))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked = append(acked, msg)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	syncs := m.Count(opSync) - before
	t.Logf("64 appends, %d fdatasyncs", syncs)
	if syncs > 16 {
		t.Errorf("64 concurrent appends took %d fdatasyncs, want at most 16", syncs)
	}
	checkLog(t, q, acked)
	total := 0
	for _, n := range commits {
		total += n
	}
	if total != 64 || len(commits) > syncs {
		t.Errorf("OnCommit saw %d messages in %d commits %v; want 64 in at most %d", total, len(commits), commits, syncs)
	}
}

// TestAppendPoisoned: a failed fdatasync or write fails its append, every
// later append fails with ErrPoisoned without writing, and a reopened
// queue takes appends again (RELIABILITY B.11, B.12).
func TestAppendPoisoned(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   string
		err  error
	}{
		{"fdatasync EIO", opSync, syscall.EIO},
		{"write ENOSPC", opWrite, syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, root := memQueueRoot(t)
			q, _ := openQueue(t, root, Options{FS: m})
			first, err := q.Append(newMessage(0, 40))
			if err != nil {
				t.Fatal(err)
			}
			m.Fail(tc.op, segmentFile, 1, tc.err, false)
			if _, err := q.Append(newMessage(1, 40)); !errors.Is(err, tc.err) {
				t.Fatalf("the failing append: %v, want %v", err, tc.err)
			}
			size, _ := q.Size()
			if tc.op == opWrite && size != frameLen(first) {
				t.Errorf("a failed write left the log at %d bytes, want %d", size, frameLen(first))
			}
			writes := m.Count(opWrite)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					if _, err := q.Append(newMessage(2+i, 40)); !errors.Is(err, ErrPoisoned) {
						t.Errorf("an append after the failure: %v, want ErrPoisoned", err)
					}
				})
			}
			wg.Wait()
			if got, _ := q.Size(); got != size || m.Count(opWrite) != writes {
				t.Errorf("a poisoned queue wrote: size %d → %d, writes %d → %d", size, got, writes, m.Count(opWrite))
			}

			q.Close()
			q, damage := openQueue(t, root, Options{FS: m})
			if len(damage) != 0 {
				t.Errorf("reopening found %v", damage)
			}
			after, err := q.Append(newMessage(100, 40))
			if err != nil {
				t.Fatalf("an append after reopening: %v", err)
			}
			got := readAll(t, q)
			if len(got) < 2 {
				t.Fatalf("after reopening the log holds %v, want %d first and %d last", got, first.ID, after.ID)
			}
			if sameMessage(got[0], first) != "" || sameMessage(got[len(got)-1], after) != "" {
				t.Errorf("after reopening the log holds %v, want %d first and %d last", got, first.ID, after.ID)
			}
			if after.ID <= got[len(got)-2].ID {
				t.Errorf("id %d reissued after reopening", after.ID)
			}
		})
	}
}

// TestAppendPoisonedWhileBatching: when a batch's fdatasync fails, none of
// the appends waiting behind it is acknowledged, and no commit is reported.
func TestAppendPoisonedWhileBatching(t *testing.T) {
	m, root := memQueueRoot(t)
	m.syncDelay = 2 * time.Millisecond
	q, _ := openQueue(t, root, Options{FS: m, OnCommit: func(messages int, _ time.Duration) {
		t.Errorf("OnCommit(%d) after a failed fdatasync", messages)
	}})
	m.Fail(opSync, segmentFile, 1, syscall.EIO, false)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			if msg, err := q.Append(newMessage(i, 40)); err == nil {
				t.Errorf("id %d acknowledged after a failed fdatasync", msg.ID)
			}
		})
	}
	wg.Wait()
}

// TestAppendCrash cuts the power at a random operation of a stream of
// concurrent appends, 2,000 times (RELIABILITY A.2): every acknowledged
// message is read back after the reboot, nothing else is delivered but
// whole frames that were sent, and no id is reissued.
//
// The seeds are shared among appendCrashWorkers parallel subtests (each
// seed on a memFS of its own, nothing global), each with one folder on
// disk for the append locks of its seeds.
func TestAppendCrash(t *testing.T) {
	seeds := figure(2000, 400, 100000)
	for w := range appendCrashWorkers {
		t.Run(fmt.Sprintf("seeds %d mod %d", w, appendCrashWorkers), func(t *testing.T) {
			t.Parallel()
			_, root := memQueueRoot(t)
			for seed := w; seed < seeds; seed += appendCrashWorkers {
				appendCrash(t, root, seed)
			}
		})
	}
}

// appendCrashWorkers is how many subtests of TestAppendCrash run at once.
const appendCrashWorkers = 4

// appendCrash is one seed of TestAppendCrash, on a new memFS over root.
func appendCrash(t *testing.T, root string, seed int) {
	t.Helper()
	m := settledMemQueueAt(t, root)
	rng := rand.New(rand.NewPCG(uint64(seed), 99))
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatalf("seed %d: Open: %v", seed, err)
	}
	m.Fail("", "", 1+rng.IntN(600), syscall.EIO, true) // the power cut: nothing after it happens

	var mu sync.Mutex
	var acked []Message
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				idx := g*20 + i
				msg, err := q.Append(newMessage(idx, 20+(idx*37+seed)%100))
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, msg)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	q.Close()
	m.Crash()

	q, damage, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatalf("seed %d: Open after the crash: %v", seed, err)
	}
	for _, d := range damage {
		if !d.Torn {
			t.Errorf("seed %d: %v", seed, d)
		}
	}
	got := map[uint64]Message{}
	maxID := uint64(0)
	for _, msg := range readAll(t, q) {
		got[msg.ID] = msg
		maxID = max(maxID, msg.ID)
		nm := newMessage(sentIndex(t, msg), len(msg.Payload))
		if msg.Source != nm.Source || string(msg.Payload) != string(nm.Payload) {
			t.Errorf("seed %d: delivered a message that was not sent: %+v", seed, msg)
		}
	}
	lost := 0
	for _, a := range acked {
		if d := sameMessage(got[a.ID], a); d != "" {
			lost++
			t.Errorf("seed %d: acknowledged id %d: %s", seed, a.ID, d)
		}
		maxID = max(maxID, a.ID)
	}
	if next, err := q.Append(newMessage(999, 30)); err != nil || next.ID <= maxID {
		t.Errorf("seed %d: the first append after the crash: id %d, %v; want an id after %d", seed, next.ID, err, maxID)
	}
	q.Close()
	if t.Failed() {
		t.Fatalf("seed %d: %d acknowledged, %d lost", seed, len(acked), lost)
	}
}

// TestAppendCrashAfterCreate cuts the power after the first acknowledged
// append to a queue that did not exist before.
func TestAppendCrashAfterCreate(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: m})
	acked, err := q.Append(newMessage(0, 40))
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	m.Crash()
	q, _ = openQueue(t, root, Options{FS: m})
	// Open fsyncs the folders it creates, so the new segment.log and the
	// acknowledged message in it survive the power cut (RELIABILITY §1
	// "fsync before ack" 2).
	checkMessages(t, readAll(t, q), []Message{acked})
}

// TestAppendRefusesOversized: a source or correlation ID too long for its
// length field is refused, and nothing is written.
func TestAppendRefusesOversized(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	for _, m := range []NewMessage{
		{Source: strings.Repeat("s", 256), Payload: []byte("{}")},
		{Source: "enqueue", CorrelationID: strings.Repeat("c", maxCorrelationID+1), Payload: []byte("{}")},
	} {
		if _, err := q.Append(m); err == nil {
			t.Errorf("a source of %d bytes and a correlation ID of %d were accepted", len(m.Source), len(m.CorrelationID))
		}
	}
	if s, _ := q.Size(); s != 0 {
		t.Errorf("refused appends wrote %d bytes", s)
	}
	m, err := q.Append(NewMessage{Source: strings.Repeat("s", 255), CorrelationID: strings.Repeat("c", maxCorrelationID), Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	checkMessages(t, readAll(t, q), []Message{m})
}

// TestAppendGathers: a batch's leader waits for as many appends as its
// previous batch held, so that batches stay large under load; a lone
// caller, whose previous batch was itself, never waits.
func TestAppendGathers(t *testing.T) {
	m, root := memQueueRoot(t)
	gate := make(chan struct{})
	var gated atomic.Bool
	m.before = func(op, name string) {
		if op == opSync && filepath.Base(name) == segmentFile && gated.CompareAndSwap(false, true) {
			<-gate // the first batch's fdatasync waits for the test
		}
	}
	q, _ := openQueue(t, root, Options{FS: m, GatherWait: time.Hour})
	pending := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.pending)
	}
	waitPending := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); pending() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d appends pending, want %d", pending(), n)
			}
		}
	}
	appendAsync := func(i int) chan Message {
		done := make(chan Message, 1)
		go func() {
			msg, err := q.Append(newMessage(i, 10))
			if err != nil {
				t.Error(err)
			}
			done <- msg
		}()
		return done
	}
	wait := func(what string, chs ...chan Message) {
		t.Helper()
		for _, ch := range chs {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return", what)
			}
		}
	}

	// a batch of one, whose fdatasync holds three more appends back: they
	// form the next batch (of three) at once
	a := appendAsync(0)
	for !gated.Load() {
		time.Sleep(time.Millisecond)
	}
	b, c, d := appendAsync(1), appendAsync(2), appendAsync(3)
	waitPending(3)
	close(gate)
	wait("the first two batches", a, b, c, d)

	// the next leader waits for three appends before it writes
	syncs := m.Count(opSync)
	e := appendAsync(4)
	waitPending(1)
	f := appendAsync(5)
	waitPending(2)
	select {
	case <-e:
		t.Fatal("a batch of two was written while the previous one held three and the wait is an hour")
	case <-time.After(50 * time.Millisecond):
	}
	g := appendAsync(6)
	wait("the gathered batch", e, f, g)
	if n := m.Count(opSync) - syncs; n != 1 {
		t.Errorf("the gathered batch of three took %d fdatasyncs, want 1", n)
	}

	// with no wait configured, a smaller batch is written at once
	q.gatherWait = -1
	wait("an append without waiting", appendAsync(7))
	// a caller alone never waits: its previous batch was itself
	q.gatherWait = time.Hour
	for i := range 5 {
		wait("a lone append", appendAsync(8+i))
	}
	if got := len(readAll(t, q)); got != 13 {
		t.Errorf("%d messages in the log, want 13", got)
	}
}

// TestAppendGoesToTheFileAtThePath: the janitor of another process deleted
// an idle queue's files (under the append lock) while this handle had them
// open, and another handle created segment.log again and appended: this
// handle's next append goes to the new file, the one every reader opens,
// not to the deleted one, and takes the next id.
func TestAppendGoesToTheFileAtThePath(t *testing.T) {
	for _, name := range []string{"OS", "memFS"} {
		t.Run(name, func(t *testing.T) {
			root, opts := t.TempDir(), Options{}
			if name == "memFS" {
				var m *memFS
				m, root = memQueueRoot(t)
				opts.FS = m
			}
			fsys := opts.FS
			if fsys == nil {
				fsys = OS{}
			}
			q1, _ := openQueue(t, root, opts)
			if _, err := q1.Append(newMessage(1, 40)); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(filepath.Join(root, testTenant, testFlow, segmentFile)); err != nil {
				t.Fatal(err)
			}
			q2, _ := openQueue(t, root, opts) // creates segment.log again
			second, err := q2.Append(newMessage(2, 40))
			if err != nil {
				t.Fatal(err)
			}
			third, err := q1.Append(newMessage(3, 40))
			if err != nil {
				t.Fatal(err)
			}
			if third.ID != second.ID+1 {
				t.Errorf("ids %d then %d: want the next id", second.ID, third.ID)
			}
			reader, _ := openQueue(t, root, opts)
			checkMessages(t, readAll(t, reader), []Message{second, third})
		})
	}
}

// TestFailedSyncDoesNotLendItsIDs: a batch whose fdatasync failed may leave
// its frames in segment.log (the pages stay readable); another process's
// next append does not take their ids.
func TestFailedSyncDoesNotLendItsIDs(t *testing.T) {
	m, root := settledMemQueue(t)
	failing, _ := openQueue(t, root, Options{FS: m})
	other, _ := openQueue(t, root, Options{FS: m}) // another process's handle
	m.Fail(opSync, segmentFile, 1, syscall.EIO, false)
	if _, err := failing.Append(newMessage(1, 50)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the append whose fdatasync failed: %v", err)
	}
	if _, err := other.Append(newMessage(2, 50)); err != nil {
		t.Fatal(err)
	}
	fresh, _ := openQueue(t, root, Options{FS: m})
	seen := map[uint64]int{}
	for _, msg := range readAll(t, fresh) {
		if seen[msg.ID]++; seen[msg.ID] > 1 {
			t.Errorf("id %d is in the log twice", msg.ID)
		}
	}
}

// TestSegmentReplacedUnderReaders: after the janitor deleted an idle
// queue's files, the next append replaces the handle's open segment.log
// while Size and Checkpoint (the status page and the metrics) read it
// without the append lock: no data race (under -race), and the file
// replaced is closed only once they are done with it.
func TestSegmentReplacedUnderReaders(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	appendN(t, q, 0, 1)
	if err := q.SaveCheckpoint(size(t, q)); err != nil {
		t.Fatal(err)
	}
	if deleted, err := deleteIdleQueue(root, testTenant, testFlow, OS{}); err != nil || !deleted {
		t.Fatalf("deleteIdleQueue = %v, %v", deleted, err)
	}
	var readErr atomic.Pointer[error] // the readers' first error
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the status page / metrics: Manager.Queues -> openInfo
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := q.Size(); err != nil {
				readErr.CompareAndSwap(nil, &err)
			}
			if _, err := q.Checkpoint(); err != nil {
				readErr.CompareAndSwap(nil, &err)
			}
		}
	}()
	time.Sleep(time.Millisecond)
	if _, err := q.Append(newMessage(1, 40)); err != nil { // swaps q.seg
		t.Fatal(err)
	}
	close(stop)
	<-done
	if p := readErr.Load(); p != nil {
		t.Errorf("a reader of the replaced segment.log failed: %v", *p)
	}
}
