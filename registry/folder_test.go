//go:build linux

package registry_test

import (
	"context"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nexushq/nexus/registry"
)

// TestOpenInAFolderNotWritable: a registry whose folder this user may not
// write (a state directory made by another user, the registry file handed
// over) is refused in one line naming the folder: SQLite makes a WAL
// database's -wal and -shm files beside it, and said "attempt to write a
// readonly database (1544)". Root may write any folder, so as root the
// open runs in a child process of this test binary as nobody.
func TestOpenInAFolderNotWritable(t *testing.T) {
	if p := os.Getenv("NEXUS_TEST_OPEN"); p != "" { // the child
		if err := os.WriteFile(os.Getenv("NEXUS_TEST_OPEN_RESULT"), []byte(openBoth(p)), 0o666); err != nil {
			t.Fatal(err)
		}
		return
	}
	top := t.TempDir()
	// the test's folders open to the child (t.TempDir makes them 0700)
	if err := os.Chmod(filepath.Dir(top), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "registry.db")
	r, err := registry.Open(context.Background(), path, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	for _, side := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + side); err == nil {
			t.Fatalf("setup: %s%s is left after the registry was closed", path, side)
		}
	}
	var got string
	if os.Geteuid() == 0 {
		if err := os.Chown(path, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		got = asNobody(t, top, "TestOpenInAFolderNotWritable", "NEXUS_TEST_OPEN", path)
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		got = openBoth(path)
	}
	want := "registry " + path + ": its folder " + dir + " is not writable by this user: SQLite makes the registry's -wal and -shm files beside it"
	if got != want+"\n"+want {
		t.Errorf("opening a registry whose folder is not writable, to write and to read:\n got %s\nwant %s (twice)", got, want)
	}
}

// openBoth opens the registry at path to write, then to read (nexus
// status), and returns the two outcomes, a line each.
func openBoth(path string) string {
	var out []string
	for _, ro := range []bool{false, true} {
		r, err := registry.Open(context.Background(), path, registry.Options{ReadOnly: ro})
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		r.Close()
		out = append(out, "opened")
	}
	return strings.Join(out, "\n")
}

// copyFile copies this test binary to dst with mode perm.
func copyFile(t *testing.T, dst string, perm os.FileMode) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// nobody is the user the tests that need another user than root's run as.
const nobody = 65534

// asNobody runs test, of a copy of this test binary in top, as nobody,
// with env set to arg and env+"_RESULT" to a file nobody may write, and
// returns what the run wrote there (the test's child half reads env and
// writes its result). The caller is root.
func asNobody(t *testing.T, top, test, env, arg string) string {
	t.Helper()
	out := filepath.Join(top, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(top, "registry.test")
	copyFile(t, bin, 0o755)
	cmd := osexec.Command(bin, "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"="+arg, env+"_RESULT="+filepath.Join(out, "result"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s as nobody: %v\n%s", test, err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "result"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
