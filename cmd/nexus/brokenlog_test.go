package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveChildEnv, set, makes the test binary a nexus process: it runs the
// command line in the variable (arguments separated by a newline) and exits
// with its code.
const serveChildEnv = "NEXUS_CLI_TEST_CHILD"

// TestServeOutlivesItsLogReader: nexus serve whose stderr reader has gone
// (nexus serve | head -1, a log shipper restarting) keeps serving, ignores
// a SIGHUP whose warning cannot be written, and stops cleanly (exit 0) on
// SIGTERM, the lines it cannot write dropped. The first write to the
// broken pipe ended the process by SIGPIPE (exit 141 from a shell).
func TestServeOutlivesItsLogReader(t *testing.T) {
	if args := os.Getenv(serveChildEnv); args != "" {
		os.Exit(run(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	state := t.TempDir()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestServeOutlivesItsLogReader$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join([]string{
		"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(state, "registry.db"), "--log-format", "json", "--shutdown-grace", "5s",
	}, "\n"))
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var listen string
	scan := bufio.NewScanner(logs)
	for listen == "" && scan.Scan() {
		var line struct{ Event, Listen string }
		if json.Unmarshal(scan.Bytes(), &line) == nil && line.Event == "started" {
			listen = line.Listen
		}
	}
	if listen == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no started event on stderr (%v)", scan.Err())
	}
	logs.Close() // the reader goes away
	// a line is logged now: the SIGHUP is ignored, and said
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + listen + "/healthz")
	if err != nil {
		t.Errorf("GET /healthz with the log's reader gone: %v", err)
	} else {
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET /healthz with the log's reader gone: %s, want 200", res.Status)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM: %v (the process has ended)", err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("nexus serve with the log's reader gone ended with %v (%v), want exit 0 after SIGTERM", cmd.ProcessState, err)
	}
}
