package flow

import (
	"strings"
	"testing"
)

// A compile error quotes at most 64 bytes of any value of the file, cut
// with an ellipsis (decisions.md, "Error messages"): a fenced block's
// kind, a loose key line, a header name, a key, a name or a regular
// expression inside an expression, a number too large or too small, a
// status code, flowmarkdown_version, a schedule's error, a YAML value of
// the wrong kind, a validate rule's message. Each was quoted whole, however long.
func TestErrorsCutLongValues(t *testing.T) {
	n := strings.Repeat("n", 1000)
	nines := strings.Repeat("9", 1000)
	sevens := strings.Repeat("7", 1000) // octal digits: YAML reads 0777… as an integer
	fm := func(kv string) string {
		return "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\neffects: [http_egress]\n" + kv + "\n---\n\n## Step: s\n```ntd\n{}\n```\n"
	}
	step := func(lines string) string { return rv6Head + "## Step: s\n" + lines + "\n```ntd\n{}\n```\n" }
	for _, c := range []struct {
		name, long, src string
	}{
		{"fenced block kind", n, rv6Head + "## Step: s\n```ntd\n{}\n```\n```" + n + "\nx\n```\n"},
		{"loose key line", n, step("when:" + n)},
		{"header name character", n, step("effects: [http_egress]\nendpoint: https://x.example.com/\nheaders: {\"" + n + "/\": \"v\"}")},
		{"header value not a string", n, step("effects: [http_egress]\nendpoint: https://x.example.com/\nheaders: {\"" + n + "\": [1]}")},
		{"header value hole", n, step("effects: [http_egress]\nendpoint: https://x.example.com/\nheaders: {\"" + n + "\": \"{{ $. }}\"}")},
		{"header set twice", n, step("effects: [http_egress]\nendpoint: https://x.example.com/\nheaders: {\"" + n + "\": \"a\", \"" + n + "\": \"b\"}")},
		{"header remove character", n, step("response_header_remove: [\"" + n + "/\"]")},
		{"header key character", n, step("response_header_" + n + "/: v")},
		{"unknown step key", n, step(n + ": v")},
		{"step key set twice", n, step(n + ": v\n" + n + ": w")},
		{"front matter key set twice", n, fm(n + ": 1\n" + n + ": 2")},
		{"unknown name", n, step("when: " + n + " == 1")},
		{"unknown hyphenated name", n, step("when: $.a-" + n + " == 1")},
		{"invalid number", nines, step("when: $.a == 1e" + nines)},
		{"regular expression", n, step("when: matches($.a, \"(" + n + "\")")},
		{"read_timeout_ms too large", nines, step("effects: [http_egress]\nendpoint: https://x.example.com/\nread_timeout_ms: " + nines)},
		{"read_timeout_ms too small", nines, step("effects: [http_egress]\nendpoint: https://x.example.com/\nread_timeout_ms: -" + nines)},
		{"response_status", nines, step("response_status: " + nines)},
		{"timeout_ms too large", nines, fm("timeout_ms: " + nines)},
		{"timeout_ms too small", nines, fm("timeout_ms: -" + nines)},
		{"queue_max_attempts too large", nines, fm("queue_max_attempts: " + nines)},
		{"backoff too large", nines, fm("queue_backoff_factor: " + nines)},
		{"backoff too small", nines, fm("queue_backoff_factor: 0.1" + nines)},
		{"schedule", n, fm("schedule: \"" + n + "\"")},
		{"whole number a string", n, fm("timeout_ms: \"" + n + "\"")},
		{"number a string", n, fm("queue_backoff_factor: \"" + n + "\"")},
		{"whole number a float", nines, fm("timeout_ms: !!float " + nines[:500])},
		{"front matter key a binary", n, fm("timeout_ms: !!binary " + n)},
		{"header key control character", n, step("response_header_" + n + ": a\x01b")},
		{"fault header key in a step", n, step("fault_header_" + n + ": v")},
		{"header key denied", n, step("response_header_x_nexus_" + n + ": v")},
		{"validate message", n, rv6Head + "## Step: s\n```validate\n$.a != null | " + n + "\n```\n"},
		{"leading zero", nines, fm("timeout_ms: 0" + nines[:100])},
		{"backoff leading zero", nines, fm("queue_backoff_factor: 0" + nines[:100])},
		{"leading zero, 200 digits", sevens, fm("timeout_ms: 0" + sevens[:199])},
		{"backoff leading zero, 200 digits", sevens, fm("queue_backoff_factor: 0" + sevens[:199])},
		{"flowmarkdown_version", n, strings.Replace(fm(""), `"0.1"`, n, 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := compileErrs(t, c.src)
			if strings.HasPrefix(c.name, "leading zero") && (len(errs) != 1 || !strings.Contains(errs[0].Msg, "has a leading zero")) {
				t.Errorf("errors %v, want one naming the leading zero", errs)
			}
			if len(errs) == 0 {
				t.Fatal("compiled")
			}
			for _, e := range errs {
				if strings.Contains(e.Msg, c.long[:65]) {
					t.Errorf("line %d quotes a value whole: %.150s…", e.Line, e.Msg)
				}
			}
		})
	}
}
