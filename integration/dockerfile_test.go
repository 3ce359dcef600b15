package integration

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	Line    int    // line the instruction starts on
	Keyword string // upper case: FROM, RUN, ...
	Args    string // everything after the keyword
}

// parseDockerfile splits a Dockerfile into instructions. It understands
// comments and backslash continuations, which is all our Dockerfile uses.
func parseDockerfile(t *testing.T, path string) []dockerInstruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("reading the Dockerfile: %v", err)
	}
	defer f.Close()

	var out []dockerInstruction
	var cur strings.Builder
	start, lineNo := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = lineNo
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		keyword, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, dockerInstruction{Line: start, Keyword: strings.ToUpper(keyword), Args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the Dockerfile: %v", err)
	}
	return out
}

// buildCommand returns the command of the build stage's RUN instruction that
// runs go build.
func buildCommand(t *testing.T, instructions []dockerInstruction) string {
	t.Helper()
	inBuild := false
	for _, in := range instructions {
		if in.Keyword == "FROM" {
			fields := strings.Fields(in.Args)
			inBuild = len(fields) == 3 && strings.EqualFold(fields[1], "AS") && fields[2] == "build"
			continue
		}
		if inBuild && in.Keyword == "RUN" && strings.Contains(in.Args, "go build") {
			return in.Args
		}
	}
	t.Fatal("Dockerfile: no RUN ... go build ... in the stage named build")
	return ""
}

// TestDockerfileBuildIsStatic runs the Dockerfile's own build command and
// checks that it produces a statically linked binary, which the distroless
// static base image (no libc) needs.
func TestDockerfileBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	command := buildCommand(t, parseDockerfile(t, filepath.Join(root, "Dockerfile")))
	if !strings.Contains(command, "CGO_ENABLED=0") {
		t.Fatalf("Dockerfile: the build command %q does not set CGO_ENABLED=0; the static base image has no libc", command)
	}
	const target = "/out/nexus"
	if n := strings.Count(command, target); n != 1 {
		t.Fatalf("Dockerfile: the build command %q names %s %d times, want once (as its -o)", command, target, n)
	}
	bin := filepath.Join(t.TempDir(), "nexus")
	command = strings.Replace(command, target, bin, 1)

	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = root
	// The image is Linux; build for it whatever the host is, so the binary is ELF.
	cmd.Env = append(os.Environ(), "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("reading the built binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary has a PT_INTERP program header: it needs a dynamic loader")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("reading the binary's imported libraries: %v", err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary imports shared libraries %v; want none", libs)
	}
}
