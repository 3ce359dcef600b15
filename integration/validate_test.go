package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const helloFlow = `---
flowmarkdown_version: "0.1"
flow: hello
tenant: acme
---

## Step: answer
` + "```ntd" + `
{"greeting": "hello, {{ $.name }}"}
` + "```" + `
`

// TestValidateExampleRepo: the example repo compiles, and the README prints
// what nexus validate says of it.
func TestValidateExampleRepo(t *testing.T) {
	t.Parallel()
	r := nexus(t, "", "validate", "flows-example/flows")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`^ok: [2-9][0-9] flows in [2-9][0-9] files\n$`).MatchString(r.stdout) {
		t.Errorf("stdout = %q, want ok: N flows in M files", r.stdout)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if printed := "$ nexus validate flows-example/flows\n" + r.stdout; !strings.Contains(string(readme), printed) {
		t.Errorf("README.md does not print what nexus validate says of the example repo:\n%s", printed)
	}
}

func TestValidateSummaryAndSkipping(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"flows/acme/hello.md": helloFlow,
		"flows/README.md":     "# Flows\n\nNot a flow: no front matter.\n",
		"flows/notes.md":      "---\ntitle: notes\n---\n\nFront matter, but no flowmarkdown_version.\n",
		"flows/.git/x.md":     "---\nflowmarkdown_version: \"0.1\"\n---\nbroken, but hidden folders are skipped\n",
		"flows/other.txt":     "not Markdown",
	})
	r := nexus(t, dir, "validate", "flows")
	if diff := cmp.Diff(result{stdout: "ok: 1 flow in 3 files\n"}, r, cmp.AllowUnexported(result{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	r = nexus(t, dir, "validate", "flows/acme/hello.md")
	if r.code != 0 || r.stdout != "ok: 1 flow in 1 file\n" {
		t.Errorf("one file: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"flows/good.md": helloFlow,
		"flows/bad.md": `---
flowmarkdown_version: "0.1"
flow: Orders
tenant: acme
queue_backoff_factor: 0.5
---

## Step: check
` + "```validate" + `
$.orderId != null | "orderId is required" | syntactic
` + "```" + `

## Step: check
response_status: 700
`,
	})
	r := nexus(t, dir, "validate", "flows")
	want := strings.Join([]string{
		`flows/bad.md:3: invalid name "Orders" for flow (tenant "acme"): character 'O' at position 1 is not allowed`,
		`flows/bad.md:5: queue_backoff_factor must be at least 1.0, not 0.5`,
		`flows/bad.md:13: duplicate step name "check" (first used at line 8): step names are unique across ## Step: and ## Fault: sections`,
		`flows/bad.md:14: response_status 700 is not a status code: use 100 to 599`,
	}, "\n") + "\n"
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if diff := cmp.Diff(want, r.stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if r.stderr != "nexus validate: 4 errors\n" {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestValidateDuplicateFlow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a/hello.md": helloFlow, "b/hello.md": helloFlow})
	r := nexus(t, dir, "validate", ".")
	if r.code != 1 || !strings.Contains(r.stdout, "b/hello.md:3: flow acme/hello is also declared in a/hello.md") {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestValidateUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		code     int
		stdout   string // substring
		stderrRe string
	}{
		{[]string{"validate"}, 2, "", `^nexus validate: give at least one flow file or folder\nUsage: nexus validate PATH`},
		{[]string{"validate", "--frobnicate", "x"}, 2, "", `^nexus validate: unknown flag --frobnicate \(nexus validate --help lists the flags\)\n$`},
		{[]string{"validate", "--help"}, 0, "Usage: nexus validate PATH...", `^$`},
		{[]string{"validate", "no/such/dir"}, 1, "no/such/dir: no such file or directory", `^nexus validate: 1 error\n$`},
		{[]string{}, 2, "", `Usage:\n  nexus COMMAND`},
		{[]string{"help"}, 0, "validate", `^$`},
		{[]string{"frobnicate"}, 2, "", `^nexus: unknown command "frobnicate"; run 'nexus help' for the list\n$`},
	}
	for _, tt := range tests {
		r := nexus(t, t.TempDir(), tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !regexp.MustCompile(tt.stderrRe).MatchString(r.stderr) {
			t.Errorf("nexus %v: exit %d (want %d)\nstdout: %q\nstderr: %q", tt.args, r.code, tt.code, r.stdout, r.stderr)
		}
	}
}
