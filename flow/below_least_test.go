package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every number setting with a least value refuses a number below it with
// one text, "KEY must be at least LEAST, not WRITTEN", whatever the form
// it is written in (a sign, hex, octal, binary, underscores, a leading
// zero, a fraction, past an int64 or a float64): the least is what to
// mend, and the number is quoted as written. The front matter's
// whole-number keys said "must be written as a plain whole number (0)" of
// +0 and 0x0, named -0x5 as -5, and "has a leading zero" of 00; a step's
// read_timeout_ms and connect_timeout_ms said "must be a whole number of
// milliseconds" of -0.5 and -1e400. A number at or above the least that
// is not written plainly is refused with one text in every setting too.
func TestBelowTheLeastOneText(t *testing.T) {
	type setting struct {
		key, least string
		src        func(value string) string
	}
	fm := func(key string) func(string) string {
		return func(value string) string {
			return "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\ndedup_key: \"{{ $.id }}\"\n" + key + ": " + value + "\n---\n\n## Step: s\n```ntd\n{}\n```\n"
		}
	}
	step := func(key string) func(string) string {
		return func(value string) string {
			return rv6Head + "## Step: s\neffects: [http_egress]\nendpoint: https://x.example.com/\n" + key + ": " + value + "\n"
		}
	}
	settings := []setting{
		{"queue_max_attempts", "1", fm("queue_max_attempts")},
		{"queue_initial_delay_ms", "0", fm("queue_initial_delay_ms")},
		{"queue_max_delay_ms", "0", fm("queue_max_delay_ms")},
		{"max_body_bytes", "1", fm("max_body_bytes")},
		{"timeout_ms", "1", fm("timeout_ms")},
		{"dedup_ttl_ms", "1", fm("dedup_ttl_ms")},
		{"queue_backoff_factor", "1.0", fm("queue_backoff_factor")},
		{"read_timeout_ms", "1", step("read_timeout_ms")},
		{"connect_timeout_ms", "1", step("connect_timeout_ms")},
	}
	// below every least (0, 1 and 1.0)
	below := []string{"-5", "-1", "-0x5", "-0o7", "-0b1", "-1_0", "-05", "-0.5", "-1e3", "-1e400", "-99999999999999999999"}
	// zero, in any form: below a least of 1
	zeros := []string{"0", "+0", "-0", "00", "-00", "0x0", "+0x0", "0o0", "0b0", "0.5", "0.0"}
	for _, s := range settings {
		values := below
		if s.least != "0" {
			values = append(values, zeros...)
		}
		for _, v := range values {
			t.Run(s.key+"="+v, func(t *testing.T) {
				var got []string
				for _, e := range compileErrs(t, s.src(v)) {
					got = append(got, e.Msg)
				}
				want := []string{s.key + " must be at least " + s.least + ", not " + v}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
			})
		}
		// at or above the least, not written plainly
		for v, n := range map[string]string{"+5": "5", "0x3": "3", "1_0": "10", "0b11": "3", "0o7": "7"} {
			t.Run(s.key+"="+v, func(t *testing.T) {
				var got []string
				for _, e := range compileErrs(t, s.src(v)) {
					got = append(got, e.Msg)
				}
				var want string
				switch {
				case s.key == "queue_backoff_factor":
					want = s.key + " must be written as a plain number (" + n + "), not \"" + v + "\""
				case strings.HasSuffix(s.key, "_ms"):
					want = s.key + " must be written as a plain whole number of milliseconds (" + n + "), not \"" + v + "\""
				default:
					want = s.key + " must be written as a plain whole number (" + n + "), not \"" + v + "\""
				}
				if diff := cmp.Diff([]string{want}, got); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
			})
		}
	}
}
