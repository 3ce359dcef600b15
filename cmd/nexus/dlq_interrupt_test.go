package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDLQMarkInterrupted: an operator's Ctrl-C (SIGINT) while nexus dlq
// replay or discard waits for the append lock another process holds ends
// the command at once, exit 1, with one line, having written nothing:
// the dead letter stays pending. The signal was not listened to: the
// command waited out the lock wait (5 s) and only then failed, or, let
// go meanwhile, went on with the replay the operator tried to stop.
func TestDLQMarkInterrupted(t *testing.T) {
	if args := os.Getenv("NEXUS_DLQ_TEST_CHILD"); args != "" {
		os.Exit(run(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc to see the child wait for the lock")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--id", "1"}, "nexus dlq replay: interrupted: nothing replayed\n"},
		{[]string{"discard", "--id", "1"}, "nexus dlq discard: interrupted: nothing discarded\n"},
		{[]string{"discard", "--all"}, "nexus dlq discard: interrupted: nothing discarded\n"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			state := t.TempDir()
			db := filepath.Join(state, "registry.db")
			deployOrders(t, db)
			q, dir := deadLetterQueue(t, state, 1)
			q.Close()
			files := func() map[string]string {
				out := map[string]string{}
				for _, name := range []string{"segment.log", "dlq.log", "dlq.log.acked"} {
					b, _ := os.ReadFile(filepath.Join(dir, name))
					out[name] = string(b)
				}
				return out
			}
			before := files()
			lock := filepath.Join(dir, "append.lock")
			f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"dlq"}, c.args...)
			args = append(args, "--tenant", "acme", "--flow", "orders", "--db", db)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDLQMarkInterrupted$", "-test.count=1")
			cmd.Env = append(os.Environ(), "NEXUS_DLQ_TEST_CHILD="+strings.Join(args, "\n"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// the child waits for the lock once it holds append.lock open
			waiting := false
			for deadline := time.Now().Add(20 * time.Second); !waiting && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "fd", "*"))
				for _, fd := range fds {
					if target, err := os.Readlink(fd); err == nil && target == lock {
						waiting = true
					}
				}
			}
			if !waiting {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the child never opened %s; stderr %q", lock, stderr.String())
			}
			time.Sleep(100 * time.Millisecond) // into the wait
			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			took := time.Since(sent)
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() || cmd.ProcessState.ExitCode() != exitError {
				t.Errorf("the child ended with %v (%v), want exit %d", err, ws, exitError)
			}
			if took > 2*time.Second {
				t.Errorf("the child ended %v after SIGINT, want at once", took)
			}
			if got := stderr.String(); got != c.want || stdout.Len() > 0 {
				t.Errorf("stdout %q, stderr %q; want stderr %q alone", stdout.String(), got, c.want)
			}
			f.Close() // the lock let go: nothing was written meanwhile
			time.Sleep(50 * time.Millisecond)
			if after := files(); after["segment.log"] != before["segment.log"] || after["dlq.log"] != before["dlq.log"] || after["dlq.log.acked"] != before["dlq.log.acked"] {
				t.Errorf("the queue's files changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}
