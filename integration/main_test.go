package integration

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// nexusBin is the binary under test, built once by TestMain. Tests run it
// through nexusBinary(), which records its sources as this package's inputs.
var nexusBin string

var sourcesOnce sync.Once

// nexusBinary is the binary under test. The first call opens every file of the
// repository (sources, go.mod, embedded pages, the example flows) while the
// tests run: go test caches a package's result by what its tests open and
// read, and the binary is built by another process, so without this a
// change to the product left these tests "ok (cached)" (the one product
// package they import is jsonlog).
func nexusBinary() string {
	sourcesOnce.Do(func() {
		filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if path != repoRoot && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir // .git, .nexus-dev, .ci
				}
				return nil
			}
			if d.Type().IsRegular() {
				if f, err := os.Open(path); err == nil {
					f.Close()
				}
			}
			return nil
		})
	})
	return nexusBin
}

// repoRoot is the repository's top folder.
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv(childHelperEnv) != "" {
		return m.Run() // a helper process of TestChildDiesWithTheTests: no binary needed
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	dir, err := os.MkdirTemp("", "nexus-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	nexusBin = filepath.Join(dir, "nexus")
	// -trimpath, like the release build and the Dockerfile, so their compiles are shared.
	build := exec.Command("go", "build", "-trimpath", "-o", nexusBin, "./cmd/nexus")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building nexus: %v\n%s", err, out)
		return 1
	}
	setParallel(4)
	return m.Run()
}

// setParallel sets -test.parallel to n unless the command line gave it.
// The package's parallel tests mostly wait (on the processes they run, on
// a retry schedule, on a cleanup a minute away), and the default of one
// at a time per core left the second core idle behind a test that slept.
func setParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// result is what one run of the binary printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
}

// nexusCmd returns a command running the binary with args in dir.
func nexusCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(nexusBinary(), args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = repoRoot
	}
	return cmd
}

// nexus runs the binary with args in dir (the repository root when dir is
// "") and returns what it printed. A Go stack trace on stderr fails the test:
// no command may show one to a user.
func nexus(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := nexusCmd(dir, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running nexus %v: %v", args, err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: code}
	if bytes.Contains(stderr.Bytes(), []byte("goroutine ")) || bytes.Contains(stderr.Bytes(), []byte("panic:")) {
		t.Fatalf("nexus %v printed a stack trace:\n%s", args, r.stderr)
	}
	return r
}

// writeFiles creates files (path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
