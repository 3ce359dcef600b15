package queue

import "testing"

// TestCutTextNeverExceedsItsBound: cutText returns at most n bytes, which
// MoveToDLQ relies on so that a dead letter always fits a frame: below the
// ellipsis's 3 bytes it cuts without the mark.
func TestCutTextNeverExceedsItsBound(t *testing.T) {
	for n := -5; n <= 4; n++ {
		if got := cutText("step failed", n); len(got) > max(n, 0) {
			t.Errorf("cutText(%q, %d) = %q, %d bytes", "step failed", n, got, len(got))
		}
	}
}
