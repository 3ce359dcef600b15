package flow

// Lines of dashes inside a step's section (never a heading that ends it),
// and front matters written in YAML's flow style.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const lineHead = "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\neffects: [http_egress]\n---\n\n"

// shapeOf compiles src and summarises it: each step with its block kind,
// when and save_body; or the errors.
func shapeOf(src string) string {
	f, err := Compile("f.md", []byte(src))
	if err != nil {
		var list ErrorList
		if errors.As(err, &list) {
			var b strings.Builder
			for _, e := range list {
				fmt.Fprintf(&b, "ERR %d: %s; ", e.Line, e.Msg)
			}
			return b.String()
		}
		return "ERR " + err.Error()
	}
	var b strings.Builder
	for _, s := range f.Steps() {
		fmt.Fprintf(&b, "step %s block=%d when=%v save=%q; ", s.Name(), s.Block(), s.When() != nil, s.SaveBody())
	}
	for _, s := range f.Faults() {
		fmt.Fprintf(&b, "fault %s block=%d; ", s.Name(), s.Block())
	}
	return b.String()
}

const okNTD = "```ntd\n{\"ok\": true}\n```\n"

// TestDashesNeverEndAStepSection: a line of dashes or equals signs inside
// a step's section ends nothing, whatever is above it (a list, a quote, a
// table, an HTML block, a paragraph): the block under it is the step's.
// Reading a paragraph over --- as Markdown's setext heading would turn a
// step's block into documentation on the next publication, silently
// (decisions.md, "Sections").
func TestDashesNeverEndAStepSection(t *testing.T) {
	want := "step answer block=1 when=false save=\"\"; "
	for _, above := range []string{
		"- the order id\n- the total",
		"* the order id",
		"1. the order id",
		"- the order id\n  continued",
		"- the order id\nlazy continuation",
		"> totals are in cents",
		"> totals are\nlazy continuation",
		"| field | source |\n| --- | --- |\n| id | $.orderId |",
		"For example\n\n    {\"orderId\": 1}",
		"<details>\n<summary>Example</summary>",
		"<pre>\nsample\n---\n</pre>",
		"[spec]: https://example.com/spec",
		"Rules for the order", // a setext heading in Markdown; see decisions.md
		"Words.\n\n- - -",
		"Words.\n\n***",
	} {
		for _, under := range []string{"---", "==="} {
			if strings.HasPrefix(above, "| field") && under == "===" {
				continue // GFM: a table row, reads as one
			}
			src := lineHead + "## Step: answer\n\n" + above + "\n" + under + "\n\n" + okNTD
			if got := shapeOf(src); got != want {
				t.Errorf("%q under %q:\n got %s\nwant %s (the block is the step's)", under, above, got, want)
			}
		}
	}
}

// TestSetextStepHeadingIsNotSilent: "Step: b" underlined, which renders
// as a heading, is no step and is not silent: the block under it is a
// second block of the step above, an error.
func TestSetextStepHeadingIsNotSilent(t *testing.T) {
	for _, h := range []string{"Step: b\n-------", "Fault: b\n--------", "Step: b\n======="} {
		src := lineHead + "## Step: a\n" + okNTD + "\n" + h + "\n" + okNTD
		got := shapeOf(src)
		if !strings.HasPrefix(got, "ERR") && !strings.Contains(got, " b ") {
			t.Errorf("%q: %s\nwant an error (a step heading spelled otherwise) or a step b", h, got)
		}
	}
}

// TestKeysEndAtALineOfDashes: key lines, a line of dashes, more key-like
// lines: the dashes end the key run as any other line does ("key save_body
// is not directly under the heading").
func TestKeysEndAtALineOfDashes(t *testing.T) {
	for _, src := range []string{
		lineHead + "## Step: a\nwhen: $.x != null\n---\nsave_body: y\n" + okNTD,
		lineHead + "## Step: a\nwhen: $.x != null\n===\nsave_body: y\n" + okNTD,
		lineHead + "## Step: a\n---\nsave_body: y\n" + okNTD,
		lineHead + "## Step: a\n===\nsave_body: y\n" + okNTD,
	} {
		got := shapeOf(src)
		if !strings.HasPrefix(got, "ERR") {
			t.Errorf("%q:\n got %s\nwant the error \"key save_body is not directly under the heading\"", src[len(lineHead):], got)
		}
	}
}

// TestFlowStyleFrontMatterEdges: IsFlowFile on front matters in
// flow style and on documentation.
func TestFlowStyleFrontMatterEdges(t *testing.T) {
	body := "\n## Step: a\n" + okNTD
	yes := []string{
		"{flowmarkdown_version: \"0.1\", flow: orders, tenant: acme}\n...",
		"{\n  flowmarkdown_version: \"0.1\",  # the version\n  # a comment line\n  flow: orders,\n  tenant: acme,\n}\n---",
		"{'flowmarkdown_version': \"0.1\", flow: orders, tenant: acme}\n---",
	}
	for _, fm := range yes {
		src := "---\n" + fm + "\n" + body
		if !IsFlowFile([]byte(src)) {
			t.Errorf("IsFlowFile false for %q", fm)
			continue
		}
		if got := shapeOf(src); got != "step a block=1 when=false save=\"\"; " {
			t.Errorf("%q: %s", fm, got)
		}
	}
	no := []string{
		"- flowmarkdown_version: \"0.1\"\n---",
		"flowmarkdown_version\n---",
		"\"flowmarkdown_version\"\n---",
		"title: Using flowmarkdown_version\n---",
		"title: Docs # see flowmarkdown_version\n---",
		"# flowmarkdown_version: \"0.1\"\ntitle: x\n---",
		"title: x\nexample: |\n  flowmarkdown_version: \"0.1\"\n---",
		"layout: page\ntags: [flowmarkdown_version]\n---",
		"{title: x, meta: {flowmarkdown_version: 1}}\n---",
		"layout: page\n\tbad: tab flowmarkdown_version\n---",
		// a block mapping indented as a whole: no line starts with the
		// key, and it is not in braces
		"  flowmarkdown_version: \"0.1\"\n  flow: orders\n  tenant: acme\n---",
	}
	for _, fm := range no {
		if IsFlowFile([]byte("---\n" + fm + "\n# Readme\n")) {
			t.Errorf("IsFlowFile true for %q", fm)
		}
	}
}

// TestBrokenFlowStyleFrontMatterIsNotSilent: a flow-style front
// matter with the key and a YAML error. A block-style one with the same
// error is a flow file whose error is reported, and so is the flow-style
// one (it was skipped as documentation: a flow the author meant vanished
// without a word).
func TestBrokenFlowStyleFrontMatterIsNotSilent(t *testing.T) {
	body := "\n## Step: a\n" + okNTD
	block := "flowmarkdown_version: \"0.1\"\nflow: orders\ntenant: acme\neffects: [http_egress\n---"
	if !IsFlowFile([]byte("---\n" + block + body)) {
		t.Fatalf("block style with a YAML error: not a flow file")
	}
	for _, fm := range []string{
		"{flowmarkdown_version: \"0.1\", flow: orders, tenant: acme, effects: [http_egress}\n---",
		"{flowmarkdown_version: \"0.1\", flow: orders, tenant: acme\n---",
		"{\"flowmarkdown_version\": \"0.1\", \"flow\": \"orders\", \"tenant\": \"acme\",, }\n---",
	} {
		src := "---\n" + fm + body
		if !IsFlowFile([]byte(src)) {
			t.Errorf("flow style with a YAML error %q: skipped as documentation, want a flow file with its YAML error reported", fm)
		}
	}
}

// TestLargeFrontMattersStayCheap: IsFlowFile runs on every Markdown file
// of a repository: a large front matter that mentions the key in a value
// is not a flow file, and a flow-style one full of aliases is not expanded.
func TestLargeFrontMattersStayCheap(t *testing.T) {
	var b strings.Builder
	b.WriteString("---\nnote: flowmarkdown_version\n")
	for i := 0; b.Len() < 8<<20; i++ {
		fmt.Fprintf(&b, "k%d: {a: [1, 2, 3], b: \"text text text\"}\n", i)
	}
	b.WriteString("---\n# Readme\n")
	src := []byte(b.String())
	start := time.Now()
	got := IsFlowFile(src)
	d := time.Since(start)
	t.Logf("8 MiB front matter: IsFlowFile=%v in %v", got, d)
	if got {
		t.Errorf("IsFlowFile true")
	}
	// aliases are not expanded (billion laughs)
	var a strings.Builder
	a.WriteString("---\n{x0: &a0 [flowmarkdown_version, flowmarkdown_version],\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&a, "x%d: &a%d [*a%d, *a%d, *a%d, *a%d],\n", i, i, i-1, i-1, i-1, i-1)
	}
	a.WriteString("}\n---\n")
	start = time.Now()
	got = IsFlowFile([]byte(a.String()))
	t.Logf("alias bomb: IsFlowFile=%v in %v", got, time.Since(start))
	if time.Since(start) > 2*time.Second {
		t.Errorf("alias bomb took %v", time.Since(start))
	}
}

// FuzzIsFlowFile: IsFlowFile never panics (it is called on every
// Markdown file of a repository; a panic in the YAML parser would stop a
// sync).
func FuzzIsFlowFile(f *testing.F) {
	f.Add([]byte("---\n{flowmarkdown_version: \"0.1\", flow: orders}\n---\n"))
	f.Add([]byte("---\nflowmarkdown_version: [&a, *a, {? x : y}]\n...\n"))
	f.Fuzz(func(t *testing.T, fm []byte) {
		IsFlowFile(append([]byte("---\nflowmarkdown_version\n"), append(fm, "\n---\n"...)...))
		IsFlowFile(append([]byte("---\n"), append(fm, "\n---\n"...)...))
	})
}
