package naming_test

import (
	"testing"

	"github.com/nexushq/nexus/naming"
)

func TestSuggest(t *testing.T) {
	known := []string{"timeout_ms", "retry", "queue_max_attempts", "keys"}
	for _, tt := range []struct{ name, want string }{
		{"timeout_sm", " (did you mean timeout_ms?)"}, // two edits
		{"retyr", " (did you mean retry?)"},
		{"key", " (did you mean keys?)"},
		{"queue_max_attempt", " (did you mean queue_max_attempts?)"},
		{"tmeout", ""},   // three edits from timeout_ms
		{"schedule", ""}, // nothing close
		{"", ""},         // four edits from the shortest
	} {
		if got := naming.Suggest(tt.name, known); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
