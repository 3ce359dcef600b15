package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCronStoppedHolderNotReplaced: the process that ticks a cron flow,
// stopped with SIGSTOP, keeps its lock, so the other process on the same
// state directory does not take the flow over while it is paused (a paused
// holder resuming next to a new one would tick twice); once continued, the
// holder ticks again and the other still does not. docs/decisions.md says
// why and what to do with a stuck process (kill it: the other takes over,
// as TestCronTwoProcessesOneTick shows).
func TestCronStoppedHolderNotReplaced(t *testing.T) {
	t.Parallel()
	be, h1, h2 := twoCronProcesses(t)
	// the tick reached the backend; its process's log line may follow
	eventually(t, 5*time.Second, "a cron_tick in the log of one process", func() bool {
		return len(h1.events("cron_tick"))+len(h2.events("cron_tick")) > 0
	})
	holder, other := h1, h2
	if len(h2.events("cron_tick")) > 0 {
		holder, other = h2, h1
	}
	if n := len(other.events("cron_tick")); n != 0 {
		t.Fatalf("both processes ticked before the stop: %d and %d cron_tick events", len(holder.events("cron_tick")), n)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { holder.cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(4 * time.Second) // four periods, and four of the other's polls (1 s)
	if n := len(other.events("cron_tick")); n != 0 {
		t.Errorf("the other process ticked %d times while the holder was stopped; want none (the stopped holder keeps its lock)", n)
	}
	// what reached the backend meanwhile: at most the one tick the holder
	// had sent when it was stopped (its worker delivers one message at a
	// time), read by the backend however late; which tick it is, the
	// holder's log says once it runs again
	during := ticksSince(be, stopped)
	if len(during) > 1 {
		t.Errorf("%d ticks reached the backend while the holder was stopped, want at most the one it had sent", len(during))
	}

	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually(t, 10*time.Second, "a tick of the resumed holder at the backend", func() bool {
		return len(ticksSince(be, resumed)) > 0
	})
	// the tick read while the holder was stopped is one it made before
	for _, x := range during {
		cid := x.header.Get("X-Correlation-Id")
		ev := waitEvents(t, holder, "cron_tick", 1, field("correlation_id", cid), 10*time.Second)[0]
		if at, err := time.Parse(time.RFC3339, fmt.Sprint(ev["scheduled_for"])); err != nil || at.After(stopped) {
			t.Errorf("the tick that reached the backend while the holder was stopped was made for %v (%v), after the stop at %s",
				ev["scheduled_for"], err, stopped.UTC().Format(time.RFC3339Nano))
		}
	}
	if n := len(other.events("cron_tick")); n != 0 {
		t.Errorf("the other process ticked %d times after the holder resumed; want none", n)
	}
}

// TestStopDuringStartIsNoError: a SIGINT or SIGTERM that comes while nexus
// serve is still starting (committing the --dev folder, opening the
// registry, loading a large live set) is the stop the operator asked for,
// as it is once the host serves: it exited 1 with a "fatal" log line and
// "nexus serve: registry …: context canceled" (or "loading the live set:
// reading the registry: context canceled"), as if the registry had failed;
// a rolling update's SIGTERM to a pod still starting read as a crash. Now
// it exits 0, its last line "stopped".
func TestStopDuringStartIsNoError(t *testing.T) {
	t.Parallel()
	// a development folder large enough that committing it takes a while
	// (seconds): the signal comes while the host is starting
	src := filepath.Join(t.TempDir(), "dev-flows")
	hello, err := os.ReadFile(filepath.Join(repoRoot, "flows-example", "flows", "acme", "hello.md"))
	if err != nil {
		t.Fatal(err)
	}
	access, err := os.ReadFile(filepath.Join(repoRoot, "flows-example", "access.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"access.yaml": string(access)}
	for i := range 2000 {
		files[fmt.Sprintf("flows/acme/hello-%d.md", i)] = strings.Replace(string(hello), "flow: hello\n", fmt.Sprintf("flow: hello-%d\n", i), 1)
	}
	writeFiles(t, src, files)

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		state := filepath.Join(t.TempDir(), "state")
		cmd := nexusCmd(t.TempDir(), "serve", "--dev", "--dev-flows", src, "--db", filepath.Join(state, "registry.db"),
			"--listen", "127.0.0.1:0", "--log-format", "json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := startChild(cmd); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// the development repo is being made: the host has not started
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(state, "dev-repo")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-exited
				t.Fatalf("no dev-repo within 20 s; stderr:\n%s", stderr.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("%v while starting: nexus serve did not exit within 60 s", sig)
		}
		code := cmd.ProcessState.ExitCode()
		if code != 0 || strings.Contains(stderr.String(), `"event":"fatal"`) || strings.Contains(stderr.String(), "context canceled") ||
			!strings.Contains(lastLines(stderr.String(), 1), `"event":"stopped"`) {
			t.Errorf("%v while nexus serve starts: exit %d, stderr:\n%s\nwant exit 0 and a stopped line, no fatal error: the stop was asked for", sig, code, lastLines(stderr.String(), 3))
		}
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestSecondSignalAfterTheStop: SIGTERMs sent one after another while
// nexus serve shuts down leave a log in the order things happened: a
// second signal that stops the process at once says so before any
// "nexus stopped" line, and one that comes once the shutdown has finished
// says nothing. The signal watch lasted past the "nexus stopped" line, so
// that a second SIGTERM a few milliseconds after it logged "a second
// signal: stopping at once" after the host had said it stopped.
func TestSecondSignalAfterTheStop(t *testing.T) {
	t.Parallel()
	for round := range 8 {
		h := startHost(t, hostOptions{})
		h.cmd.Process.Signal(syscall.SIGTERM)
		// the next SIGTERMs come every fraction of a millisecond, so that
		// some fall in the shutdown and some after it
		gap := time.Duration(round)*100*time.Microsecond + 50*time.Microsecond
		for deadline := time.Now().Add(30 * time.Second); ; {
			select {
			case <-h.exited:
			case <-time.After(gap):
				if time.Now().After(deadline) {
					t.Fatalf("round %d: nexus serve did not exit within 30 s of the SIGTERMs", round)
				}
				h.cmd.Process.Signal(syscall.SIGTERM)
				continue
			}
			break
		}
		stopped := false
		for _, line := range h.logLines() {
			var ev struct{ Event, Msg string }
			json.Unmarshal([]byte(line), &ev)
			switch {
			case ev.Event == "stopped":
				stopped = true
			case stopped:
				t.Errorf("round %d: %q logged after nexus stopped", round, ev.Msg)
			}
		}
	}
}
