//go:build linux

package registry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// readOnlyView bind-mounts dir read-only at a new folder and returns it;
// the mount goes when the test ends. Where this process may not mount (it
// needs CAP_SYS_ADMIN, which CI's machines, root like these, have) the
// test fails under CI and is skipped, saying so, elsewhere.
func readOnlyView(t *testing.T, dir string) string {
	t.Helper()
	view := t.TempDir()
	if err := syscall.Mount(dir, view, "", syscall.MS_BIND, ""); err != nil {
		cannotMount(t, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(view, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", view, err)
		}
	})
	if err := syscall.Mount("", view, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		cannotMount(t, err)
	}
	return view
}

// cannotMount ends a test that needs a read-only mount this process may
// not make: a failure under CI, which must run it; a skip elsewhere.
func cannotMount(t *testing.T, err error) {
	t.Helper()
	msg := fmt.Sprintf("this process may not mount a folder read-only (%v): the read-only view of a registry cannot be made here (run as root)", err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestReadOnlyOpenOnAReadOnlyFileSystem: nexus status and nexus journal
// read a registry on a read-only file system (a snapshot, a volume
// mounted read-only), with or without the -wal and -shm files a running
// server leaves. They failed with SQLite's "unable to open database file
// (14)": a WAL database's reader makes a -shm file, and could not.
func TestReadOnlyOpenOnAReadOnlyFileSystem(t *testing.T) {
	for _, running := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "registry.db")
		r := open(t, path, registry.Options{})
		publish(t, r, registry.Publication{Flows: compileAll(t, "a", "b"), Commit: "c1"})
		if !running {
			r.Close() // the last connection checkpoints the -wal away
		} else if _, err := os.Stat(path + "-wal"); err != nil {
			t.Fatalf("a registry in use has no -wal file: %v", err)
		}
		view := readOnlyView(t, dir)
		ro, err := registry.Open(context.Background(), filepath.Join(view, "registry.db"), registry.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("running=%v: Open read-only on a read-only file system: %v", running, err)
		}
		if st := status(t, ro); st.Commit != "c1" || st.Flows != 2 {
			t.Errorf("running=%v: status %+v, want commit c1 and 2 flows", running, st)
		}
		ro.Close()
		// a write open says why it cannot be, in one line
		_, err = registry.Open(context.Background(), filepath.Join(view, "registry.db"), registry.Options{})
		want := "registry " + filepath.Join(view, "registry.db") + ": the file system is read-only: nexus serve and nexus deploy write the registry (nexus status and nexus journal only read it)"
		if err == nil || err.Error() != want {
			t.Errorf("running=%v: Open for writing: %v, want %q", running, err, want)
		}
	}
}

func compileAll(t *testing.T, names ...string) []*flow.Flow {
	t.Helper()
	var out []*flow.Flow
	for _, n := range names {
		out = append(out, compile(t, "acme", n, "1"))
	}
	return out
}

// smallDisk mounts a tmpfs of size bytes at a new folder and returns it;
// the mount goes when the test ends.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		cannotMount(t, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file into dir until its disk is full and returns the
// file's path (removing it gives the room back).
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	f.Close()
	return filler
}

// TestJournalOnAFullDiskLogsNotEveryRound: a full disk refuses every round
// of the journal writer (every FlushEvery); the refusal is logged at the
// 1st, 2nd, 4th, 8th… round of the run, not at each (a full disk filled
// the log with the same line five times a second), and the writes going
// through again are logged once (journal_write_resumed), with the entries
// kept meanwhile written.
func TestJournalOnAFullDiskLogsNotEveryRound(t *testing.T) {
	dir := smallDisk(t, 4<<20)
	path := filepath.Join(dir, "registry.db")
	r := open(t, path, registry.Options{})
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: 2 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)})
	w.Start()
	defer w.Stop()
	// fill the disk
	filler := fillDisk(t, dir)
	for i := range 200 {
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(logs.Events(t, "journal_write_failed")) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d journal_write_failed lines in 10 s of a full disk, want 4 at least; log:\n%s", len(logs.Events(t, "journal_write_failed")), logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	failed := logs.Events(t, "journal_write_failed")
	for i, e := range failed[:4] {
		if want := float64(int(1) << i); e["failures"] != want {
			t.Errorf("journal_write_failed line %d: failures %v, want %v (lines at the 1st, 2nd, 4th, 8th round)", i, e["failures"], want)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for len(logs.Events(t, "journal_write_resumed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no journal_write_resumed once the disk had room; log:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	if got := journal(t, r, registry.JournalQuery{Limit: 1000}); len(got) != 200 {
		t.Errorf("%d journal entries, want the 200 appended on the full disk", len(got))
	}
}

// TestOpenOnAFullDisk: a registry whose disk is full fails to open with an
// error that says the disk is full, for the readers (nexus status) and the
// writers (nexus serve, nexus deploy), not with SQLite's "disk I/O error
// (4874)" (its -shm file could not grow), which reads as a failing disk.
func TestOpenOnAFullDisk(t *testing.T) {
	dir := smallDisk(t, 1<<20)
	path := filepath.Join(dir, "registry.db")
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: compileAll(t, "a", "b"), Commit: "c1"})
	r.Close() // the -wal and -shm files go with the last connection
	fillDisk(t, dir)
	failed := 0
	for _, opts := range []registry.Options{{ReadOnly: true}, {}} {
		reg, err := registry.Open(context.Background(), path, opts)
		if err == nil {
			reg.Close()
			continue // it managed without room: nothing to say
		}
		failed++
		if want := "registry " + path + ": the disk holding " + dir + " is full ("; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Open(%+v) on a full disk: %v; want it to begin %q", opts, err, want)
		}
	}
	if failed == 0 {
		t.Fatal("no open failed on the full disk: the test no longer tests anything")
	}
}
