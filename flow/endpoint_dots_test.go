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
