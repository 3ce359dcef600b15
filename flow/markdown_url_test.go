package flow

import "testing"

// TestDotSegmentInQueryOfPathlessURL: an endpoint with no path, whose
// query holds a slash and "..", has no dot-segment in its path: the query
// is data (RFC 3986 §5.2.4 only removes dot-segments from the path).
func TestDotSegmentInQueryOfPathlessURL(t *testing.T) {
	ep := "https://api.example.com?next=/a/../b"
	if errs := compileErrs(t, rv6Head+"## Step: s\neffects: [http_egress]\nendpoint: "+ep+"\n"); errs != nil {
		t.Errorf("endpoint %s: errors %v, want none (the dots are in the query)", ep, errs)
	}
	tmpl, err := CompileTemplate(`https://api.example.com?id={{ "7" }}&next=/../x`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.RenderURL(&Env{Doc: templateDoc()}); err != nil {
		t.Errorf("RenderURL = %q, %v; want the URL (the dots are in the query)", got, err)
	}
}

// TestEmptyHTMLCommentClosesOnItsLine: CommonMark's HTML block of kind 2
// ends on the line that holds "-->", the opening line included: "<!-->"
// (an empty comment since CommonMark 0.31, and GitHub's) ends where it
// begins, and the steps below it count.
func TestEmptyHTMLCommentClosesOnItsLine(t *testing.T) {
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n---\n\n" +
		"<!-->\n\n## Step: answer\n```ntd\n{\"v\": 1}\n```\n"
	f, err := Compile("f.md", []byte(src))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	var names []string
	for s := range f.Steps() {
		names = append(names, s.Name())
	}
	if len(names) != 1 || names[0] != "answer" {
		t.Errorf("steps %q, want [answer]", names)
	}
}
