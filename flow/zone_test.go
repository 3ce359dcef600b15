package flow

import (
	"strings"
	"testing"
)

// TestScheduleTimezones: a zone is one of the embedded database, whatever
// the host's tz files hold (right/UTC is Debian's, not Go's); "" and Local
// are refused.
func TestScheduleTimezones(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone string
		ok   bool
	}{
		{"UTC", true},
		{"Europe/Berlin", true},
		{"Etc/GMT+2", true},
		{"Asia/Kolkata", true},
		{"", false},
		{"Local", false},
		{"right/UTC", false},
		{"posixrules", false},
		{"Europe/Berlin/", false},
		{"../UTC", false},
		{"europe/berlin", false},
	}
	for _, tt := range tests {
		src := "---\nflowmarkdown_version: \"0.1\"\nflow: tick\ntenant: acme\nschedule: \"@hourly\"\nschedule_timezone: \"" + tt.zone + "\"\n---\n\n## Step: copy\n```ntd\n{{ $ }}\n```\n"
		_, err := Compile("tick.md", []byte(src))
		switch {
		case tt.ok && err != nil:
			t.Errorf("%q: %v", tt.zone, err)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), "is not an IANA time zone")):
			t.Errorf("%q: err = %v, want is not an IANA time zone", tt.zone, err)
		}
	}
}
