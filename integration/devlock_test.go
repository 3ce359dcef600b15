package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecondDevServeOnOneStateDirIsRefused: a second nexus serve --dev on
// the state directory of a running one is refused at start, in one line
// naming the directory, and leaves the first one's repo as it was. Both
// rewrote dev-repo: the second emptied the first's work tree and committed
// its own folder under it.
func TestSecondDevServeOnOneStateDirIsRefused(t *testing.T) {
	t.Parallel()
	flows := t.TempDir()
	if err := os.CopyFS(flows, os.DirFS(filepath.Join(repoRoot, "flows-example"))); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	db := filepath.Join(state, "registry.db")
	_, stdout := launch(t, t.TempDir(), []string{"serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", db, "--dev-flows", flows}, nil, "")
	waitBanner(t, stdout)
	devRepo := filepath.Join(state, "dev-repo")
	head := func() string {
		t.Helper()
		out, err := exec.Command("git", "-C", devRepo, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatalf("git rev-parse in %s: %v", devRepo, err)
		}
		return strings.TrimSpace(string(out))
	}
	before := head()

	// the second serves another folder: had it committed, the repo would
	// hold it
	other := t.TempDir()
	if err := os.CopyFS(other, os.DirFS(flows)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "flows", "note.txt"), []byte("the second's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nexusBinary(), "serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", db, "--dev-flows", other, "--log-format", "json")
	cmd.Dir = t.TempDir()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	err := cmd.Run()
	code := -1
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	}
	want := "nexus serve: development mode: another nexus serve --dev is using the state directory " + state + ": stop it, or give this one another --db"
	if lines := strings.Split(strings.TrimSpace(errOut.String()), "\n"); code != 1 || lines[len(lines)-1] != want {
		t.Errorf("the second serve --dev: exit %d (%v), stderr:\n%s\nwant exit 1 and the last line %q", code, err, errOut.String(), want)
	}
	if got := head(); got != before {
		t.Errorf("the second serve --dev committed %s over the first's %s", got, before)
	}
	if _, err := os.Stat(filepath.Join(devRepo, "flows", "note.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second serve --dev copied its folder into the first's repo (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(devRepo, "access.yaml")); err != nil {
		t.Errorf("the first's repo lost its files: %v", err)
	}
}

// TestDevServeWhoseStateIsItsFolderIsRefused: nexus serve --dev whose
// --db puts the state directory at the top of the folder it serves is
// refused at start, in one line naming the folder, and makes nothing
// there. The repo's folder was the folder served: it was not left out of
// the copy, and every start committed the state (registry.db, the queues'
// logs with their payloads, the clone) into dev-repo with the flows.
func TestDevServeWhoseStateIsItsFolderIsRefused(t *testing.T) {
	t.Parallel()
	for _, viaLink := range []bool{false, true} {
		flows := t.TempDir()
		if err := os.CopyFS(flows, os.DirFS(filepath.Join(repoRoot, "flows-example"))); err != nil {
			t.Fatal(err)
		}
		state := flows
		if viaLink { // a link to the folder names the same folder
			state = filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(flows, state); err != nil {
				t.Fatal(err)
			}
		}
		db := filepath.Join(state, "registry.db")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, nexusBinary(), "serve", "--dev", "--listen", "127.0.0.1:0",
			"--db", db, "--dev-flows", flows, "--log-format", "json")
		cmd.Dir = t.TempDir()
		var errOut strings.Builder
		cmd.Stderr = &errOut
		err := cmd.Run()
		cancel()
		code := -1
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		}
		want := "nexus serve: development mode: --db " + db + " puts the state directory at the top of the folder --dev-flows serves, " + flows +
			": its files (registry.db, the queues) would be committed with the flows; give --db a file in a folder of its own, such as " +
			filepath.Join(flows, ".nexus-dev", "registry.db")
		if lines := strings.Split(strings.TrimSpace(errOut.String()), "\n"); code != 1 || lines[len(lines)-1] != want {
			t.Errorf("serve --dev --db %s: exit %d (%v), stderr:\n%s\nwant exit 1 and the last line %q", db, code, err, errOut.String(), want)
		}
		for _, name := range []string{"dev-repo", "dev-repo.lock", "registry.db", "queues"} {
			if _, err := os.Lstat(filepath.Join(flows, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("serve --dev --db %s made %s in the folder it serves (%v)", db, name, err)
			}
		}
	}
}
