package host_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestUIJournalRefusedFiltersSayNothingOfTheJournal: a Journal page whose
// filters are refused (400) lists nothing because it read nothing; it
// said "The journal is empty." or "No entry matches these filters." under
// the error, of a journal it never read, and its form put the default
// limit in place of the one typed, which the error names.
func TestUIJournalRefusedFiltersSayNothingOfTheJournal(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	entries, _ := testJournal()
	writeJournal(t, fx.reg, entries...)
	for _, tc := range []struct {
		query, field string // the field that keeps what was typed
	}{
		{"limit=5000", `<input name="limit" value="5000"`},
		{"limit=abc", `<input name="limit" value="abc"`},
		{"tenant=A", `<input name="tenant" value="A"`},
		{"tenant=acme&before=garbage", `<input name="tenant" value="acme"`},
	} {
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal?"+tc.query), http.StatusBadRequest)
		for _, claim := range []string{"The journal is empty", "No entry matches", "No older entries"} {
			if strings.Contains(body, claim) {
				t.Errorf("/ui/journal?%s, refused, says %q of a journal it did not read", tc.query, claim)
			}
		}
		if !strings.Contains(body, tc.field) {
			t.Errorf("/ui/journal?%s: the form does not keep what was typed (%s)", tc.query, tc.field)
		}
	}
}
