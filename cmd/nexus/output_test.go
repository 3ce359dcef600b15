package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputToAFullDiskIsAnError: a command whose output cannot be written
// (stdout a full disk) says so in one line on stderr and exits 1; every
// command but nexus key generate exited 0 having printed nothing, and a
// script (nexus status > status.txt, nexus journal > audit.log) went on
// with an empty file.
func TestOutputToAFullDiskIsAnError(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/full (Linux's full disk) cannot be opened: %v", err)
	}
	defer full.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "state", "registry.db")
	deployOrders(t, db)
	src := filepath.Join(dir, "x.md")
	if err := os.WriteFile(src, []byte(minimalFlow("acme", "x")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		cmd  string
	}{
		{[]string{"status", "--db", db}, "nexus status"},
		{[]string{"journal", "--db", db}, "nexus journal"},
		{[]string{"dlq", "list", "--db", db}, "nexus dlq list"},
		{[]string{"validate", src}, "nexus validate"},
		{[]string{"deploy", "--db", db, src}, "nexus deploy"},
		{[]string{"version"}, "nexus version"},
		{[]string{"--version"}, "nexus"},
		{[]string{"help"}, "nexus"},
		{[]string{"status", "--help"}, "nexus status"},
		{[]string{"help", "journal"}, "nexus journal"},
	} {
		var stderr bytes.Buffer
		code := run(c.args, full, &stderr)
		want := c.cmd + ": the output could not be written (write /dev/full: no space left on device)\n"
		if code != exitError || stderr.String() != want {
			t.Errorf("nexus %s >/dev/full: exit %d, stderr %q; want exit 1 and %q", strings.Join(c.args, " "), code, stderr.String(), want)
		}
	}
}
