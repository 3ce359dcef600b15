package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestValidateRefusesAFIFOWithoutBlocking: a named pipe given to nexus
// validate (or deploy) is refused as "not a regular file" at once (opening
// it once waited for a writer, for ever).
func TestValidateRefusesAFIFOWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.md")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type result struct {
		code   int
		stdout string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run([]string{"validate", fifo}, &stdout, &stderr)
		done <- result{code, stdout.String()}
	}()
	select {
	case r := <-done:
		if want := fifo + ": not a regular file"; r.code != exitError || firstLine(r.stdout) != want {
			t.Errorf("nexus validate FIFO: exit %d, %q; want exit 1 and %q", r.code, r.stdout, want)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("nexus validate of a FIFO still blocks after 5 s, in os.Open")
		// unblock it: a writer opens the pipe and closes it at once
		if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
		<-done
	}
}

// TestDeployTheSameFileGivenTwoWays: a folder and one of its files named
// another way (dir and dir/./x.md) are one file to deploy (they once made
// two sources with one path, and the flow was refused as "also declared
// in" itself).
func TestDeployTheSameFileGivenTwoWays(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "flows-example", "flows", "acme", "hello.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.md"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "registry.db")
	var stdout, stderr bytes.Buffer
	code := run([]string{"deploy", "--db", db, dir, dir + "/./hello.md"}, &stdout, &stderr)
	if code != exitOK {
		t.Errorf("nexus deploy DIR DIR/./hello.md: exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}
