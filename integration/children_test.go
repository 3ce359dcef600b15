package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spawns carries the commands startChild starts to the one goroutine that
// starts them all (spawner).
var spawns = make(chan spawn)

type spawn struct {
	cmd  *exec.Cmd
	done chan error
}

func init() { go spawner() }

// spawner starts the commands of startChild from one OS thread kept for
// the life of the test binary. A child started with Pdeathsig is killed by
// the kernel when the thread that forked it exits, not the process
// (golang/go#27505): any thread of the runtime may exit, but this one only
// goes with the process, so a child dies with the tests, whether they end
// or a timeout kills them.
func spawner() {
	runtime.LockOSThread() // never unlocked: the thread is this goroutine's until the process exits
	for s := range spawns {
		s.done <- s.cmd.Start()
	}
}

// startChild starts cmd like cmd.Start, as a child that the kernel kills
// when the test binary exits, so that no nexus serve outlives a test
// binary killed by go test's timeout. (A process a child forks in turn,
// such as the nexus strace runs, is not covered.)
func startChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawns <- spawn{cmd, done}
	return <-done
}

// childHelperEnv makes the test binary TestChildDiesWithTheTests runs be
// the helper that starts a child and then waits to be killed.
const childHelperEnv = "NEXUS_TEST_CHILD_HELPER"

// TestChildDiesWithTheTests kills, as go test's timeout would, a test
// binary that started a long child through startChild, and checks that
// the child goes with it.
func TestChildDiesWithTheTests(t *testing.T) {
	if os.Getenv(childHelperEnv) != "" {
		// the helper: a child, its pid, then nothing until the kill
		sleeper := exec.Command("sleep", "300")
		if err := startChild(sleeper); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(sleeper.Process.Pid)
		select {}
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithTheTests$", "-test.count=1")
	helper.Env = append(os.Environ(), childHelperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the helper printed no child pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the helper printed %q, not a child pid", line)
	}
	if !alive(pid) {
		t.Fatalf("the child %d is not running before the helper is killed", pid)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child %d still runs 10 s after the test binary that started it was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// the state follows the command name's closing parenthesis
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
