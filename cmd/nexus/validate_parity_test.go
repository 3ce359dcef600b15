package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/registry"
)

// nexus validate and nexus deploy read a folder as git sync reads a
// commit: what git sync refuses in a commit, they refuse in the folder,
// with the same errors (the paths those of the folder), and what git sync
// takes, they take.

const parityFlow = `---
flowmarkdown_version: "0.1"
flow: hello
tenant: acme
---

## Step: answer
` + "```ntd" + `
{"greeting": "hello"}
` + "```" + `
`

const parityAccess = "keys: []\n"

// brokenAccess is not valid YAML (at line 2, its parser says).
const brokenAccess = "keys:\n  - id: a\n    tenant: [acme\n"

// parityRepo writes a config repo (access.yaml, flows/acme/hello.md) and
// the files given, and returns its folder.
func parityRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{"access.yaml": parityAccess, "flows/acme/hello.md": parityFlow}
	for name, data := range files {
		all[name] = data
	}
	writeFiles(t, dir, all)
	return dir
}

// runCLI runs nexus with args and returns its exit status and the lines
// it printed on standard output.
func runCLI(t *testing.T, args ...string) (int, []string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n"), stderr.String()
}

// syncErrors commits the folder dir into a git repo and returns the errors
// git sync refuses that commit for (none when it takes it).
func syncErrors(t *testing.T, dir string) []string {
	t.Helper()
	state := t.TempDir()
	repo := filepath.Join(state, "src")
	if _, _, err := gitsync.CommitFolder(repo, dir); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), filepath.Join(state, "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	s, err := gitsync.New(gitsync.Config{Repo: repo, Dir: filepath.Join(state, "clone"), Registry: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res.Errors
}

// inFolder names git sync's errors as the folder's: a path of the commit
// is one under dir.
func inFolder(dir string, errs []string) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = dir + string(filepath.Separator) + e
	}
	return out
}

// TestValidateRefusesWhatGitSyncRefuses: a config repo git sync refuses
// (a broken access.yaml, one with a number YAML reads and a reader may
// not or a tag on the whole file, a flow whose version is not the string
// "0.1" or whose step value is tagged, a file over the size limit in
// flows/, a broken flow in a hidden folder of flows/) is refused by nexus validate and
// nexus deploy, with git sync's errors; validate once passed the first
// two (and deploy published the second), and skipped hidden folders.
func TestValidateRefusesWhatGitSyncRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string // git sync's error, the commit's path
	}{
		{"a broken access.yaml", map[string]string{"access.yaml": brokenAccess}, "access.yaml:2: not valid YAML"},
		{"a rate not written plainly", map[string]string{"access.yaml": "keys:\n  - {id: a, tenant: acme, flows: [\"*\"], rate: 0x10,\n     sha256: " + strings.Repeat("ab", 32) + "}\n"},
			`access.yaml:2: rate must be written as a plain number (16), not "0x10"`},
		{"a tag on the whole access.yaml", map[string]string{"access.yaml": "--- !foo\nkeys: []\n"},
			"access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !foo"},
		{"a step value tagged", map[string]string{"flows/acme/hello.md": strings.Replace(parityFlow, "## Step: answer\n", "## Step: answer\nresponse_header_x_a: !foo b\n", 1)},
			"flows/acme/hello.md:8: response_header_x_a must be a string, not a value tagged !foo"},
		{"a file over the limit in flows/", map[string]string{"flows/big.txt": strings.Repeat("x", 1_100_000)},
			"flows/big.txt: 1100000 bytes, over the limit of 1048576"},
		{"a broken flow in a hidden folder", map[string]string{"flows/.wip/broken.md": strings.Replace(parityFlow, "flow: hello", "flow: Broken", 1)},
			`flows/.wip/broken.md:3: invalid name "Broken"`},
		{"a name git sync refuses", map[string]string{`flows/acme/a\b.md`: parityFlow},
			`flows/acme/a\b.md: a path that would escape flows/`},
		{"folders nested too deep", map[string]string{"flows/" + strings.Repeat("d/", 64) + "x.txt": ""},
			"flows/" + strings.Repeat("d/", 63) + "d: folders nested deeper than 64 levels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := parityRepo(t, c.files)
			synced := syncErrors(t, dir)
			if len(synced) == 0 || !strings.HasPrefix(synced[0], c.want) {
				t.Fatalf("git sync refuses the commit for %q, want an error beginning %q", synced, c.want)
			}
			want := inFolder(dir, synced)
			code, lines, stderr := runCLI(t, "validate", dir)
			if code != exitError || !slices.Equal(lines, want) {
				t.Errorf("nexus validate DIR: exit %d, %q (%s); want exit 1 and %q", code, lines, stderr, want)
			}
			code, lines, stderr = runCLI(t, "deploy", "--db", filepath.Join(t.TempDir(), "registry.db"), dir)
			if code != exitError || !slices.Equal(lines, want) || !strings.Contains(stderr, "nothing published") {
				t.Errorf("nexus deploy DIR: exit %d, %q (%s); want exit 1 and %q", code, lines, stderr, want)
			}
		})
	}
}

// TestValidateAccessFileNamedAlone: access.yaml named on its own is read
// as an access file (it was compiled as Markdown, and passed): a broken
// one is refused with git sync's error, a good one passes.
func TestValidateAccessFileNamedAlone(t *testing.T) {
	dir := parityRepo(t, map[string]string{"access.yaml": brokenAccess})
	synced := syncErrors(t, dir)
	want := inFolder(dir, synced)
	file := filepath.Join(dir, "access.yaml")
	if code, lines, _ := runCLI(t, "validate", file); code != exitError || len(want) == 0 || !slices.Equal(lines, want) {
		t.Errorf("nexus validate DIR/access.yaml: exit %d, %q; want exit 1 and %q", code, lines, want)
	}
	good := parityRepo(t, nil)
	if code, lines, _ := runCLI(t, "validate", filepath.Join(good, "access.yaml")); code != exitOK || !slices.Equal(lines, []string{"ok: 0 flows in 1 file"}) {
		t.Errorf("nexus validate of a good access.yaml: exit %d, %q", code, lines)
	}
}

// TestValidateTakesWhatGitSyncTakes: of a config repo, git sync reads
// flows/ and access.yaml only: a broken flow elsewhere (docs/) does not
// refuse it, and nexus validate of the repo passes it too (it read every
// .md of the folder); the checkout's own .git is not read.
func TestValidateTakesWhatGitSyncTakes(t *testing.T) {
	dir := parityRepo(t, map[string]string{
		"docs/draft.md":       strings.Replace(parityFlow, "flow: hello", "flow: Draft", 1),
		"README.md":           "# a config repo\n",
		".git/HEAD":           "ref: refs/heads/main\n",
		"flows/.git/x.md":     "---\nflowmarkdown_version: \"0.1\"\n---\nnot a flow\n",
		"flows/acme/notes.md": "# notes\n",
	})
	if synced := syncErrors(t, dir); len(synced) != 0 {
		t.Fatalf("git sync refuses the commit: %q", synced)
	}
	if code, lines, stderr := runCLI(t, "validate", dir); code != exitOK || !slices.Equal(lines, []string{"ok: 1 flow in 2 files"}) {
		t.Errorf("nexus validate DIR: exit %d, %q (%s); want ok: 1 flow in 2 files", code, lines, stderr)
	}
	want := []string{"published acme/hello v1", "unchanged access keys of " + filepath.Join(dir, "access.yaml") + " (0 keys)"}
	if code, lines, stderr := runCLI(t, "deploy", "--db", filepath.Join(t.TempDir(), "registry.db"), dir); code != exitOK || !slices.Equal(lines, want) {
		t.Errorf("nexus deploy DIR: exit %d, %q (%s)", code, lines, stderr)
	}
}

// TestValidateRefusesEveryLinkOfTheFlowsFolder: git sync refuses a
// symbolic link anywhere in the flows folder, not only a .md one (a link
// cannot be copied into a commit here, so the words are the folder's);
// and a config repo's access.yaml that is a link, which git sync reads as
// "not a regular file".
func TestValidateRefusesEveryLinkOfTheFlowsFolder(t *testing.T) {
	dir := parityRepo(t, nil)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "flows", "acme", "logo.png")); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "flows", "acme", "logo.png") + ": a symbolic link or special file: a folder of flows holds regular files only"}
	for _, args := range [][]string{{"validate", dir}, {"deploy", "--db", filepath.Join(t.TempDir(), "registry.db"), dir}} {
		if code, lines, _ := runCLI(t, args...); code != exitError || !slices.Equal(lines, want) {
			t.Errorf("nexus %s: exit %d, %q; want exit 1 and %q", args[0], code, lines, want)
		}
	}

	linked := parityRepo(t, nil)
	target := filepath.Join(t.TempDir(), "access.yaml")
	if err := os.WriteFile(target, []byte(parityAccess), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(linked, "access.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(linked, "access.yaml")); err != nil {
		t.Fatal(err)
	}
	want = []string{filepath.Join(linked, "access.yaml") + ": not a regular file"}
	if code, lines, _ := runCLI(t, "validate", linked); code != exitError || !slices.Equal(lines, want) {
		t.Errorf("nexus validate of a repo whose access.yaml is a link: exit %d, %q; want exit 1 and %q", code, lines, want)
	}
}

// TestValidateFlowsFolderLimits: git sync's limit on the entries of the
// flows folder, and its refusal of a name with a control character, are
// nexus validate's too (a folder of flows is read as a flows folder).
func TestValidateFlowsFolderLimits(t *testing.T) {
	t.Run("entries", func(t *testing.T) {
		dir := t.TempDir()
		for i := range gitsync.DefaultMaxFiles + 1 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.txt", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{fmt.Sprintf("%s/: more than %d files", dir, gitsync.DefaultMaxFiles)}
		if code, lines, _ := runCLI(t, "validate", dir); code != exitError || !slices.Equal(lines, want) {
			t.Errorf("exit %d, %q; want exit 1 and %q", code, lines, want)
		}
	})
	t.Run("a name with a control character", func(t *testing.T) {
		// git (go-git here) makes no commit of such a name, which an
		// attacker's tree may hold: the words are names_test.go's
		dir := parityRepo(t, map[string]string{"flows/acme/\x1b[31mx.md": parityFlow})
		want := []string{fmt.Sprintf("%q: a name with a control or format character, or not UTF-8: flows/ holds plainly named files only",
			filepath.Join(dir, "flows", "acme", "\x1b[31mx.md"))}
		if code, lines, _ := runCLI(t, "validate", dir); code != exitError || !slices.Equal(lines, want) {
			t.Errorf("exit %d, %q; want exit 1 and %q", code, lines, want)
		}
	})
}
