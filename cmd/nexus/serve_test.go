package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesNetworkStateDirectory: when the state directory is on a
// network file system (queue.CheckLocal says so; a stand-in here, as the
// test machine has no NFS mount), nexus serve exits 1 with one line naming
// it, before it creates the registry or anything else in that folder.
func TestServeRefusesNetworkStateDirectory(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	var checked string
	defer func(f func(string) error) { checkStateDir = f }(checkStateDir)
	checkStateDir = func(dir string) error {
		checked = dir
		return errors.New("the state directory " + dir + " is on NFS, a network file system: put --db on a local disk")
	}
	var stdout, stderr bytes.Buffer
	code := runServe([]string{"--db", filepath.Join(state, "registry.db"), "--repo", t.TempDir(), "--log-format", "text"}, &stdout, &stderr)
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if checked != state {
		t.Errorf("checked %q, want the state directory %q", checked, state)
	}
	want := "nexus serve: the state directory " + state + " is on NFS, a network file system: put --db on a local disk\n"
	if !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("stderr ends %q, want %q", stderr.String(), want)
	}
	entries, err := os.ReadDir(state)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the refused state directory holds %v, want nothing", entries)
	}
}
