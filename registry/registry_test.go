package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

func userVersion(t *testing.T, path string) int {
	t.Helper()
	var v int
	if err := sideDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenCreatesTheFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "c", "registry.db")
	r := open(t, path, registry.Options{})
	if r.Path() != path {
		t.Errorf("Path() = %q, want %q", r.Path(), path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the file was not created: %v", err)
	}
	if g := generation(t, r); g != 0 {
		t.Errorf("a new registry is at generation %d, want 0", g)
	}
	if diff := cmp.Diff(registry.Status{}, status(t, r)); diff != "" {
		t.Errorf("Status of a new registry (-want +got):\n%s", diff)
	}
}

func TestOpenRefusesABadPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(file, "registry.db") // its folder is a file
	r, err := registry.Open(context.Background(), path, registry.Options{})
	if err == nil {
		r.Close()
		t.Fatal("Open succeeded under a file")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("the error %q does not name the path", err)
	}
}

// TestOpenTwice: opening a registry again, closed or still open, runs no
// migration twice and keeps everything.
func TestOpenTwice(t *testing.T) {
	path := dbPath(t)
	r1, err := registry.Open(context.Background(), path, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, r1, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}, Commit: "c1"})
	want := status(t, r1)

	r2 := open(t, path, registry.Options{}) // while r1 is open
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	r3 := open(t, path, registry.Options{}) // after r1 closed
	for i, r := range []*registry.Registry{r2, r3} {
		if diff := cmp.Diff(want, status(t, r)); diff != "" {
			t.Errorf("handle %d: Status (-want +got):\n%s", i+2, diff)
		}
		if diff := cmp.Diff([]liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}}, summary(load(t, r))); diff != "" {
			t.Errorf("handle %d: live set (-want +got):\n%s", i+2, diff)
		}
	}
	if v := userVersion(t, path); v != 2 {
		t.Errorf("user_version %d, want 2", v)
	}
}

// TestOpenRefusesAFileThatIsNotSQLite: a --db naming a file that is not
// an SQLite database at all (a lock file, notes) is refused in the words
// the read-only commands use, for writing and reading alike, and left as
// it was (SQLite said "file is not a database (26)"); a file the server
// cannot create says why, not SQLite's "unable to open database file".
func TestOpenRefusesAFileThatIsNotSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "append.lock")
	if err := os.WriteFile(path, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := registry.Open(context.Background(), path, registry.Options{ReadOnly: ro})
		if want := path + " is not a registry (not an SQLite database)"; err == nil || err.Error() != want {
			t.Errorf("Open (read-only %v): %v, want %q", ro, err, want)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "not a database\n" {
		t.Errorf("the refused file changed: %q, %v", b, err)
	}
	// a file that cannot be read is said as it is (SQLite said "unable
	// to open database file"); a path through a file fails for root too
	if err := registry.CheckSQLite(filepath.Join(path, "registry.db")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("CheckSQLite of a path through a file: %v, want the system's error", err)
	}
	// /proc takes no new file, for root either
	const uncreatable = "/proc/nexus-registry.db"
	_, err := registry.Open(context.Background(), uncreatable, registry.Options{})
	if want := "registry " + uncreatable + " cannot be opened for writing: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Open where no file can be made: %v, want %q and why", err, want)
	}
}

// TestOpenRefusesAnotherProgramsDatabase: a SQLite file that holds tables
// but no registry schema (another program's database, a mistyped --db) is
// refused, and left byte for byte as it was: no table added, no switch to
// WAL. It was migrated (nexus deploy published into it), though the
// read-only commands refused the same file as not a registry. A file
// without tables is a new registry.
func TestOpenRefusesAnotherProgramsDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db := sideDB(t, path)
	exec(t, db, `CREATE TABLE notes (text TEXT)`)
	exec(t, db, `INSERT INTO notes VALUES ('kept')`)
	db.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = registry.Open(context.Background(), path, registry.Options{})
	if err == nil || !strings.Contains(err.Error(), "not a registry (an SQLite database of another program") {
		t.Fatalf("Open: %v, want it refused as another program's database", err)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused file changed (%d bytes before, %d after, %v)", len(before), len(after), err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Errorf("the refused file was switched to WAL")
	}

	empty := filepath.Join(t.TempDir(), "registry.db")
	exec(t, sideDB(t, empty), `PRAGMA user_version = 0`) // an SQLite file with no table
	r := open(t, empty, registry.Options{})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	if v := userVersion(t, empty); v != 2 {
		t.Errorf("user_version %d, want 2", v)
	}
}

// TestOpenRefusesADirectory: a --db naming a folder (the state directory
// instead of the file in it) is refused with one line naming the file
// expected, not SQLite's "unable to open database file (14)".
func TestOpenRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := registry.Open(context.Background(), dir, registry.Options{})
	want := "registry " + dir + " is a directory: give the registry file, such as " + filepath.Join(dir, "registry.db")
	if err == nil || err.Error() != want {
		t.Errorf("Open(a folder): %v, want %q", err, want)
	}
}

// TestOpenRefusesANewerSchema: a file written by a newer nexus is refused
// with an error that says so, and is left as it was.
func TestOpenRefusesANewerSchema(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	r.Close()
	exec(t, sideDB(t, path), `PRAGMA user_version = 3`)

	r2, err := registry.Open(context.Background(), path, registry.Options{})
	if err == nil {
		r2.Close()
		t.Fatal("Open accepted a schema newer than it knows")
	}
	want := "registry " + path + ": schema version 3 is newer than this nexus knows (2): upgrade nexus"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if v := userVersion(t, path); v != 3 {
		t.Errorf("user_version %d after the refusal, want 3 (untouched)", v)
	}
	if got := versions(t, sideDB(t, path), "acme", "a"); !cmp.Equal(got, []int{1}) {
		t.Errorf("versions of acme/a after the refusal: %v", got)
	}
}

// TestOpenMigratesVersionOne: a registry of schema version 1 (its journal
// indexed by id) gets version 2 (indexed by time) at the next Open, and
// keeps its journal.
func TestOpenMigratesVersionOne(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	w.Append(registry.Entry{At: t0, Door: "run", Tenant: "acme", Flow: "a", Version: 1, CorrelationID: "c1", Outcome: "succeeded", Status: 200})
	w.Stop()
	r.Close()
	db := sideDB(t, path)
	exec(t, db, `DROP INDEX journal_flow_at`)
	exec(t, db, `CREATE INDEX journal_flow ON journal (tenant, flow, id)`)
	exec(t, db, `PRAGMA user_version = 1`)

	r2 := open(t, path, registry.Options{})
	if v := userVersion(t, path); v != 2 {
		t.Errorf("user_version %d, want 2", v)
	}
	var indexes []string
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		indexes = append(indexes, n)
	}
	rows.Close()
	if diff := cmp.Diff([]string{"journal_at", "journal_flow_at"}, indexes); diff != "" {
		t.Errorf("the journal's indexes (-want +got):\n%s", diff)
	}
	got, err := r2.Journal(context.Background(), registry.JournalQuery{Tenant: "acme", Flow: "a"})
	if err != nil || len(got) != 1 || got[0].CorrelationID != "c1" {
		t.Errorf("the journal after the migration: %+v, %v", got, err)
	}
}

// TestRegistryFileThatIsALinkIsRefused: RELIABILITY.md E21 and
// docs/decisions.md ("No symbolic links in the state directory"): a
// registry.db planted as a link to a file elsewhere is refused, and
// nothing is written through it (SQLite would have made the target a
// registry, its -wal and -shm beside it).
func TestRegistryFileThatIsALinkIsRefused(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "elsewhere.db")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "registry.db")
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
	r, err := registry.Open(context.Background(), path, registry.Options{})
	if err == nil {
		r.Close()
		t.Errorf("registry.Open of a registry.db that is a symbolic link succeeded")
	} else if want := "registry.db is a symbolic link"; !strings.Contains(err.Error(), want) {
		t.Errorf("registry.Open: %v, want an error saying %q", err, want)
	}
	if info, err := os.Stat(outside); err != nil || info.Size() != 0 {
		t.Errorf("the link's target was written through: %v, %d bytes", err, info.Size())
	}
	for _, side := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(outside + side); err == nil {
			t.Errorf("%s was created beside the link's target", filepath.Base(outside+side))
		}
	}
}

// TestRegistryThatIsNotAFileIsRefused: --db naming a device, a pipe or a
// folder (or a -wal beside the registry that is one) is refused in the
// registry's words, read-only or not, and at once: /dev/null gave SQLite's
// "disk I/O error (1034)", and a pipe blocked CheckSQLite's first read.
func TestRegistryThatIsNotAFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	walDir := filepath.Join(dir, "state", "registry.db")
	if err := os.MkdirAll(walDir+"-wal", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{os.DevNull, os.DevNull + " is not a registry (not a regular file)"},
		{fifo, fifo + " is not a registry (not a regular file)"},
		{walDir, "registry.db-wal is not a regular file"},
	} {
		for _, readOnly := range []bool{false, true} {
			done := make(chan error, 1)
			go func() {
				r, err := registry.Open(context.Background(), tc.path, registry.Options{ReadOnly: readOnly})
				if err == nil {
					r.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("registry.Open(%s, read-only %v): %v, want an error saying %q", tc.path, readOnly, err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("registry.Open(%s, read-only %v) still blocks after 5 s", tc.path, readOnly)
			}
		}
		if tc.path == walDir {
			continue // the registry itself is not there: CheckSQLite has nothing to refuse
		}
		done := make(chan error, 1)
		go func() { done <- registry.CheckSQLite(tc.path) }()
		select {
		case err := <-done:
			if want := "is not a registry (not a regular file)"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckSQLite(%s): %v, want an error saying %q", tc.path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("CheckSQLite(%s) still blocks after 5 s", tc.path)
		}
	}
}

// TestWriteRefusedAsBusyNamesTheRegistry: a write refused because the
// database stayed locked says which registry and why. It said only
// SQLite's "database is locked (5) (SQLITE_BUSY)": nexus deploy printed
// that, and the doors' dedup errors and journal_write_failed named
// neither the file nor the wait. (A trigger answers "database is locked"
// at once, as SQLite does once the busy timeout is out.)
func TestWriteRefusedAsBusyNamesTheRegistry(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	exec(t, sideDB(t, path), `CREATE TRIGGER busy BEFORE INSERT ON dedup BEGIN SELECT RAISE(ABORT, 'database is locked'); END`)
	_, _, err := r.Dedup().Claim(context.Background(), "acme", "a", "k", false, time.Minute)
	if want := "registry " + path + ": locked by another process's write (waited up to 10s): "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Claim against a locked registry: %v, want an error beginning %q", err, want)
	}
}

// TestConcurrentOpenOfANewRegistry: processes opening a new registry at
// once (nexus serve and a CLI command) each open it. The check that refuses
// another program's database read the schema version and the tables in two
// statements, and a migration committed between them made nexus's own
// registry, being made, look like another program's.
func TestConcurrentOpenOfANewRegistry(t *testing.T) {
	for round := 0; round < 150; round++ {
		path := filepath.Join(t.TempDir(), fmt.Sprint(round), "registry.db")
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := registry.Open(context.Background(), path, registry.Options{})
				if err != nil {
					errs <- err
					return
				}
				r.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: concurrent Open of a new registry: %v", round, err)
		}
	}
}

// TestJournalByCorrelationID: the executions of one request or message
// (its attempts) are found by its correlation ID, newest first, alone or
// within a flow.
func TestJournalByCorrelationID(t *testing.T) {
	r := open(t, dbPath(t), registry.Options{})
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	for i, cid := range []string{"c1", "c2", "c1", "c3", "c1"} {
		w.Append(registry.Entry{At: t0.Add(time.Duration(i) * time.Second), Door: "enqueue", Tenant: "acme", Flow: "a", Version: 1,
			CorrelationID: cid, MsgID: 7, Attempt: i + 1, Outcome: "failed", Status: 502})
	}
	w.Stop()
	for _, c := range []struct {
		q    registry.JournalQuery
		want []int // attempts
	}{
		{registry.JournalQuery{CorrelationID: "c1"}, []int{5, 3, 1}},
		{registry.JournalQuery{Tenant: "acme", Flow: "a", CorrelationID: "c1", Limit: 2}, []int{5, 3}},
		{registry.JournalQuery{Tenant: "acme", Flow: "b", CorrelationID: "c1"}, nil},
		{registry.JournalQuery{CorrelationID: "nobody"}, nil},
	} {
		got, err := r.Journal(context.Background(), c.q)
		var attempts []int
		for _, e := range got {
			attempts = append(attempts, e.Attempt)
		}
		if err != nil || !slices.Equal(attempts, c.want) {
			t.Errorf("%+v: attempts %v, %v; want %v (newest first)", c.q, attempts, err, c.want)
		}
	}
}

// TestWALCutBackAfterABurst: the -wal file, grown far past its usual size
// by a burst of writes while another program held an old snapshot (no
// checkpoint can start the file over under it), is cut back to
// WALSizeLimit once that reader has gone. It stayed at its peak for as
// long as the registry was in use.
func TestWALCutBackAfterABurst(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	reader, err := sideDB(t, path).Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil { // the snapshot
		t.Fatal(err)
	}
	ctx := context.Background()
	d := r.Dedup()
	answer := bytes.Repeat([]byte("x"), 256<<10)
	commit := func(i int) {
		t.Helper()
		key := fmt.Sprintf("key-%d", i)
		_, claim, err := d.Claim(ctx, "acme", "f", key, false, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(ctx, "acme", "f", key, claim, answer, false, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	walSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for i := range 48 { // 12 MiB of answers
		commit(i)
	}
	peak := walSize()
	if peak < 2*registry.WALSizeLimit {
		t.Fatalf("setup: the -wal file holds %d bytes after the burst under an old snapshot, want over %d", peak, 2*registry.WALSizeLimit)
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	// the next commit checkpoints the whole file, the one after starts it over
	for i := 48; i < 52; i++ {
		commit(i)
		if walSize() <= registry.WALSizeLimit {
			return
		}
	}
	t.Errorf("the -wal file holds %d bytes (%d at the peak) after the reader went and 4 more commits, want at most %d",
		walSize(), peak, registry.WALSizeLimit)
}

// TestOpenCancelledWhileLockedSaysCancelled: a start stopped (SIGTERM) while
// the registry waits for another process's write lock ends with the
// cancellation, which nexus serve reports as a stop asked for (exit 0),
// not with the lock's error, which it reported as a failure (exit 1).
func TestOpenCancelledWhileLockedSaysCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	lockAsAnotherProcess(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r, err := registry.Open(ctx, path, registry.Options{})
	if err == nil {
		r.Close()
		t.Fatal("Open succeeded while another process held the write lock")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open: %v, want the context's end", err)
	}
}

// TestReadOnlyOpenOfALockedRegistrySaysSo: a registry another process
// holds locked for itself (SQLite's exclusive locking mode, in which a WAL
// database's readers wait too: the sqlite3 shell of an operator, a backup
// tool) refuses nexus status and nexus journal, after SQLite's wait, with
// the error a write refused so gives: naming the registry, saying another
// process holds it locked. It said "registry PATH: database is locked (5)
// (SQLITE_BUSY)".
func TestReadOnlyOpenOfALockedRegistrySaysSo(t *testing.T) {
	path := dbPath(t)
	open(t, path, registry.Options{}).Close()
	ctx := context.Background()
	conn, err := sideDB(t, path).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`PRAGMA locking_mode = EXCLUSIVE`, `BEGIN IMMEDIATE`, `INSERT INTO state (key, value) VALUES ('held', 1)`, `COMMIT`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r, err := registry.Open(ctx, path, registry.Options{ReadOnly: true})
	if err == nil {
		r.Close()
		t.Fatal("a read-only Open succeeded while another process held the registry locked")
	}
	if want := "registry " + path + ": locked by another process"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("read-only Open: %v; want an error beginning %q", err, want)
	}
}
