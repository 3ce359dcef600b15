package flow

import (
	"strings"
	"testing"
)

// A text template (a header value, a dedup_key, a response_status, an
// endpoint) renders at most 16 MiB, as a string + makes: one that holds a
// large value many times stops with an error once past it, before it
// writes the rest. 20 holes of a 1 MiB field made 20 MiB, a thousand of a
// 10 MiB message 10 GB.
func TestTextTemplatesAreBounded(t *testing.T) {
	env := &Env{Doc: NewObject([]string{"s"}, []any{strings.Repeat("x", 1<<20)})}
	src := strings.Repeat("{{ $.s }}", 20)
	const want = "the rendered text is larger than the limit of 16777216 bytes"
	tmpl, err := CompileTemplate(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(env); err == nil || err.Error() != want {
		t.Errorf("Render: %v, want %q", err, want)
	}
	if _, _, err := tmpl.RenderKey(env); err == nil || err.Error() != want {
		t.Errorf("RenderKey: %v, want %q", err, want)
	}
	url, err := CompileTemplate("https://example.com/x?q=" + strings.Repeat("{{ $.s }}", 20))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := url.RenderURL(env); err == nil || err.Error() != want {
		t.Errorf("RenderURL: %v, want %q", err, want)
	}
	// 16 holes of 1 MiB less a byte each fit
	env = &Env{Doc: NewObject([]string{"s"}, []any{strings.Repeat("x", 1<<20-1)})}
	tmpl, _ = CompileTemplate(strings.Repeat("{{ $.s }}", 16))
	if s, err := tmpl.Render(env); err != nil || len(s) != 16*(1<<20-1) {
		t.Errorf("16 holes of 1 MiB less a byte: %d bytes, %v", len(s), err)
	}
}
