package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/registry"
)

func runNexus(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func minimalFlow(tenant, name string) string {
	return fmt.Sprintf("---\nflowmarkdown_version: \"0.1\"\nflow: %s\ntenant: %s\n---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n", name, tenant)
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestValidateFolderGivenTwice: a folder of 34 MB of Markdown
// given twice (or with a folder inside it) is 34 MB of Markdown, under
// the 64 MiB of one commit: each file is read and counted once (when
// validate and deploy first read folders as git sync does, the same files
// counted twice and the folder was refused).
func TestValidateFolderGivenTwice(t *testing.T) {
	dir := t.TempDir()
	page := "# notes\n" + strings.Repeat("x", 1_000_000-9) + "\n"
	files := map[string]string{"acme/x.md": minimalFlow("acme", "x")}
	for i := range 34 {
		files[fmt.Sprintf("sub/n%02d.md", i)] = page
	}
	writeFiles(t, dir, files)
	want := "ok: 1 flow in 35 files\n"
	if code, out, errOut := runNexus(t, "validate", dir); code != exitOK || out != want {
		t.Fatalf("validate DIR: exit %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{dir, dir}, {dir, filepath.Join(dir, "sub")}} {
		if code, out, _ := runNexus(t, append([]string{"validate"}, args...)...); code != exitOK || out != want {
			t.Errorf("validate %q: exit %d %q; want exit 0 and %q", args, code, out, want)
		}
		db := filepath.Join(t.TempDir(), "registry.db")
		if code, out, _ := runNexus(t, append([]string{"deploy", "--db", db}, args...)...); code != exitOK || out != "published acme/x v1\n" {
			t.Errorf("deploy %q: exit %d %q; want exit 0 and published acme/x v1", args, code, out)
		}
	}
}

// TestValidateOneFolderTwoSpellings: the same folder (or file)
// given as a relative and an absolute path is read once (its flows were
// "declared twice").
func TestValidateOneFolderTwoSpellings(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"flows/acme/x.md": minimalFlow("acme", "x")})
	t.Chdir(dir)
	for _, args := range [][]string{
		{"flows", filepath.Join(dir, "flows")},
		{"flows", "./flows/acme/x.md"},
		{"flows", "flows/acme/../acme/x.md"},
	} {
		if code, out, _ := runNexus(t, append([]string{"validate"}, args...)...); code != exitOK || out != "ok: 1 flow in 1 file\n" {
			t.Errorf("validate %q: exit %d %q; want ok: 1 flow in 1 file", args, code, out)
		}
	}
}

// TestValidateOutput: the summary line, singular and plural, errors
// one a line on stdout and their count on stderr, exit 1 on an error
// (a path that does not exist too), exit 2 on bad usage (passes).
func TestValidateOutput(t *testing.T) {
	one := t.TempDir()
	writeFiles(t, one, map[string]string{"acme/x.md": minimalFlow("acme", "x")})
	if code, out, _ := runNexus(t, "validate", one); code != exitOK || out != "ok: 1 flow in 1 file\n" {
		t.Errorf("one flow: exit %d %q", code, out)
	}
	two := t.TempDir()
	writeFiles(t, two, map[string]string{"acme/x.md": minimalFlow("acme", "x"), "acme/y.md": minimalFlow("acme", "y"), "README.md": "# r\n"})
	if code, out, _ := runNexus(t, "validate", two); code != exitOK || out != "ok: 2 flows in 3 files\n" {
		t.Errorf("two flows: exit %d %q", code, out)
	}
	empty := t.TempDir()
	if code, out, _ := runNexus(t, "validate", empty); code != exitOK || out != "ok: 0 flows in 0 files\n" {
		t.Errorf("empty: exit %d %q", code, out)
	}
	bad := t.TempDir()
	writeFiles(t, bad, map[string]string{"acme/x.md": strings.Replace(minimalFlow("acme", "x"), "flow: x", "flow: X", 1)})
	code, out, errOut := runNexus(t, "validate", bad)
	if code != exitError || !strings.HasPrefix(out, filepath.Join(bad, "acme", "x.md")+":3: ") || strings.Count(out, "\n") != 1 || errOut != "nexus validate: 1 error\n" {
		t.Errorf("a broken flow: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runNexus(t, "validate", filepath.Join(bad, "nope")); code != exitError || errOut != "nexus validate: 1 error\n" {
		t.Errorf("a missing path: exit %d %q", code, errOut)
	}
	if code, _, _ := runNexus(t, "validate"); code != exitUsage {
		t.Errorf("no path: exit %d", code)
	}
}

// TestValidateReadmeExamples: the README's validate example holds, and a
// broken flow in a hidden folder (flows/.wip/) refuses the folder, as it
// refuses a commit.
func TestValidateReadmeExamples(t *testing.T) {
	if code, out, _ := runNexus(t, "validate", "../../flows-example/flows"); code != exitOK || out != "ok: 20 flows in 21 files\n" {
		t.Errorf("validate flows-example/flows: exit %d %q (README: ok: 20 flows in 21 files)", code, out)
	}
	if code, out, _ := runNexus(t, "validate", "../../flows-example"); code != exitOK || out != "ok: 20 flows in 21 files\n" {
		t.Errorf("validate flows-example: exit %d %q", code, out)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{".wip/x.md": strings.Replace(minimalFlow("acme", "x"), "flow: x", "flow: X", 1)})
	if code, _, _ := runNexus(t, "validate", dir); code != exitError {
		t.Errorf("validate of a folder with a broken .wip/x.md: exit %d, want 1", code)
	}
}

// TestDeployAllOrNothing: one broken file among good ones, a link,
// a broken access.yaml: nothing is published, the registry holds no flow
// and no key (passes).
func TestDeployAllOrNothing(t *testing.T) {
	for name, extra := range map[string]map[string]string{
		"a broken flow":    {"flows/acme/z.md": strings.Replace(minimalFlow("acme", "z"), "flow: z", "flow: Z", 1)},
		"a broken access":  {"access.yaml": "keys: [\n"},
		"a big other file": {"flows/acme/logo.png": strings.Repeat("x", 1<<20+1)},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"access.yaml": "keys: []\n", "flows/acme/x.md": minimalFlow("acme", "x"), "flows/acme/y.md": minimalFlow("acme", "y")}
			for k, v := range extra {
				files[k] = v
			}
			writeFiles(t, dir, files)
			db := filepath.Join(t.TempDir(), "registry.db")
			code, _, errOut := runNexus(t, "deploy", "--db", db, dir)
			if code != exitError || !strings.Contains(errOut, "nothing published") {
				t.Fatalf("exit %d %q", code, errOut)
			}
			if _, err := os.Stat(db); err == nil {
				reg, err := registry.Open(context.Background(), db, registry.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer reg.Close()
				ls, err := reg.Load(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if n := len(ls.Flows()); n != 0 {
					t.Errorf("%d flows published", n)
				}
			}
		})
	}
}

// TestDeployOneRepoTwoSpellings: the same config repo given as
// repo and repo/ (or ./repo) is one repo (deploy refused it as "a second
// config repo in one deploy").
func TestDeployOneRepoTwoSpellings(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"access.yaml": "keys: []\n", "flows/acme/x.md": minimalFlow("acme", "x")})
	db := filepath.Join(t.TempDir(), "registry.db")
	code, out, _ := runNexus(t, "deploy", "--db", db, dir, dir+"/")
	want := []string{"published acme/x v1", "unchanged access keys of " + filepath.Join(dir, "access.yaml") + " (0 keys)"}
	if code != exitOK || !slices.Equal(strings.Split(strings.TrimSpace(out), "\n"), want) {
		t.Errorf("deploy DIR DIR/: exit %d %q", code, out)
	}
}

// TestValidateNotAFlowFile: a file named alone that is not a flow file is
// an error for validate and deploy alike (validate said "ok: 0 flows in 1
// file" where deploy refused it); Markdown in a folder that is not a flow
// file is skipped, with a warning when its front matter looks meant for a
// flow (a misspelt flowmarkdown_version), and none for a README.
func TestValidateNotAFlowFile(t *testing.T) {
	dir := t.TempDir()
	typo := strings.Replace(minimalFlow("acme", "y"), "flowmarkdown_version", "flowmarkdown_versoin", 1)
	writeFiles(t, dir, map[string]string{"acme/x.md": minimalFlow("acme", "x"), "acme/y.md": typo, "README.md": "# flows\n", "notes.txt": "hello\n"})
	y := filepath.Join(dir, "acme", "y.md")
	warning := "warning: " + y + ": skipped, not a flow file: its front matter has flowmarkdown_versoin, not flowmarkdown_version\n"
	if code, out, errOut := runNexus(t, "validate", dir); code != exitOK || out != "ok: 1 flow in 3 files\n" || errOut != "nexus validate: "+warning {
		t.Errorf("a folder with a misspelt flow: exit %d %q %q", code, out, errOut)
	}
	for _, c := range []struct{ path, why string }{
		{y, "its front matter has flowmarkdown_versoin, not flowmarkdown_version"},
		{filepath.Join(dir, "README.md"), "it does not start with front matter holding flowmarkdown_version"},
		{filepath.Join(dir, "notes.txt"), "it does not start with front matter holding flowmarkdown_version"},
	} {
		want := c.path + ": not a flow file: " + c.why + "\n"
		if code, out, errOut := runNexus(t, "validate", c.path); code != exitError || out != want || errOut != "nexus validate: 1 error\n" {
			t.Errorf("validate %s: exit %d %q %q, want 1 %q", c.path, code, out, errOut, want)
		}
		db := filepath.Join(t.TempDir(), "registry.db")
		if code, out, errOut := runNexus(t, "deploy", "--db", db, c.path); code != exitError || out != want || !strings.Contains(errOut, "nothing published") {
			t.Errorf("deploy %s: exit %d %q %q, want 1 %q", c.path, code, out, errOut, want)
		}
	}
	db := filepath.Join(t.TempDir(), "registry.db")
	if code, out, errOut := runNexus(t, "deploy", "--db", db, dir); code != exitOK || out != "published acme/x v1\n" || errOut != "nexus deploy: "+warning {
		t.Errorf("deploy of the folder: exit %d %q %q", code, out, errOut)
	}
}

// TestDeployPublishesANamedAccessFile: an access.yaml named alone is
// published, replacing the access keys (it was checked and left out, exit
// 0: a key revoked from it stayed live); a config repo's access.yaml named
// again is the same file; a second key set in one deploy is an error that
// names both, and publishes nothing.
func TestDeployPublishesANamedAccessFile(t *testing.T) {
	entry := func(id, key string) string {
		h := access.HashKey(key)
		return "  - id: " + id + "\n    tenant: acme\n    sha256: " + hex.EncodeToString(h[:]) + "\n    flows: [\"*\"]\n"
	}
	const keyA, keyB = "nxk_deploy_key_a_0123456789abcdef0123", "nxk_deploy_key_b_0123456789abcdef0123"
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"access.yaml": "keys:\n" + entry("a", keyA) + entry("b", keyB), "flows/acme/x.md": minimalFlow("acme", "x")})
	db := filepath.Join(t.TempDir(), "registry.db")
	keysOf := func() []string {
		t.Helper()
		reg, err := registry.Open(context.Background(), db, registry.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		live, err := reg.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range live.Access().Keys() {
			ids = append(ids, k.ID)
		}
		return ids
	}
	deploy := func(paths ...string) (int, []string) {
		t.Helper()
		code, out, stderr := runNexus(t, append([]string{"deploy", "--db", db}, paths...)...)
		t.Logf("deploy %v: exit %d %q %q", paths, code, out, stderr)
		return code, strings.Split(strings.TrimSpace(out), "\n")
	}
	accessFile := filepath.Join(repo, "access.yaml")
	if code, lines := deploy(repo, accessFile); code != exitOK || !slices.Equal(lines, []string{"published acme/x v1", "published access keys of " + accessFile + " (2 keys)"}) {
		t.Fatalf("deploy REPO REPO/access.yaml: exit %d %q", code, lines)
	}
	// key b revoked: access.yaml named with a flow file
	writeFiles(t, repo, map[string]string{"access.yaml": "keys:\n" + entry("a", keyA)})
	if code, lines := deploy(filepath.Join(repo, "flows", "acme", "x.md"), accessFile); code != exitOK || !slices.Equal(lines, []string{"unchanged acme/x v1", "published access keys of " + accessFile + " (1 key)"}) {
		t.Fatalf("deploy FLOW access.yaml: exit %d %q", code, lines)
	}
	if diff := cmp.Diff([]string{"a"}, keysOf()); diff != "" {
		t.Errorf("the live keys after the named access.yaml (-want +got):\n%s", diff)
	}
	if code, lines := deploy(accessFile); code != exitOK || !slices.Equal(lines, []string{"unchanged access keys of " + accessFile + " (1 key)"}) {
		t.Errorf("deploy access.yaml again: exit %d %q", code, lines)
	}
	// two key sets: nothing published
	other := filepath.Join(t.TempDir(), "access.yaml")
	writeFiles(t, filepath.Dir(other), map[string]string{"access.yaml": "keys:\n" + entry("b", keyB)})
	code, lines := deploy(accessFile, other)
	if want := other + ": a second access.yaml in one deploy, besides " + accessFile + ": deploy one key set at a time"; code != exitError || !slices.Equal(lines, []string{want}) {
		t.Errorf("deploy with two access.yaml: exit %d %q, want exit %d and %q", code, lines, exitError, want)
	}
	if diff := cmp.Diff([]string{"a"}, keysOf()); diff != "" {
		t.Errorf("the live keys after a refused deploy (-want +got):\n%s", diff)
	}
}
