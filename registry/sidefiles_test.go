//go:build linux

package registry_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nexushq/nexus/registry"
)

// TestOpenWithSideFilesOfAnotherUser: a registry whose -wal and -shm files
// another user left beside it (a server once run as root and killed,
// which does not remove them) is refused in one line naming the file this
// user may not open, to write and to read; SQLite said "unable to open
// database file (14)", which names neither. As root, which may open any
// file, the open runs in a child process of this test binary as nobody.
func TestOpenWithSideFilesOfAnotherUser(t *testing.T) {
	if p := os.Getenv("NEXUS_TEST_SIDE"); p != "" { // the child
		if err := os.WriteFile(os.Getenv("NEXUS_TEST_SIDE_RESULT"), []byte(openBoth(p)), 0o666); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Geteuid() != 0 {
		const msg = "the -wal and -shm files of another user are made as root (run as root)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	top := t.TempDir()
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(top), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "registry.db")
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Commit: "c1"})
	// the -wal and -shm files as a killed server leaves them: a copy
	// made while they are open
	for _, side := range []string{"-wal", "-shm"} {
		b, err := os.ReadFile(path + side)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, "kept"+side), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	for _, side := range []string{"-wal", "-shm"} {
		if err := os.Rename(filepath.Join(top, "kept"+side), path+side); err != nil {
			t.Fatal(err)
		}
	}
	// the folder and the registry given to nobody; the side files root's
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	got := asNobody(t, top, "TestOpenWithSideFilesOfAnotherUser", "NEXUS_TEST_SIDE", path)
	write := "registry " + path + ": registry.db-wal cannot be read and written by this user (permission denied): the registry's -wal and -shm files belong to the registry's owner"
	read := "registry " + path + ": registry.db-wal cannot be read by this user (permission denied): the registry's -wal and -shm files belong to the registry's owner"
	if got != write+"\n"+read {
		t.Errorf("opening a registry whose -wal and -shm are another user's, to write and to read:\n got %s\nwant %s\n     %s", got, write, read)
	}
}
