package host_test

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestUIJournalFormWithEmptyFields: the Journal page's filter form is a
// plain HTML GET form of four fields (tenant, flow, correlation id,
// limit), so a browser sends every field, the ones left empty too
// ("?tenant=acme&flow=echo&correlation_id=&limit=100" for a filter by
// flow). docs/management.md: the Journal page shows the journal "filtered
// by tenant, flow and correlation ID"; the form left with an empty
// correlation id must filter by the other fields, not answer 400
// "Correlation_id is empty: give one, or leave it out." (a refusal meant
// for a script's unset variable on /api/journal, which the form cannot
// avoid: the field is always there).
func TestUIJournalFormWithEmptyFields(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	entries, _ := testJournal()
	writeJournal(t, fx.reg, entries...)
	corrs := regexp.MustCompile(`<td class="t"><code>([^<]*)</code></td>`)

	// what the form's fields are named, as the page itself says
	body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal"), http.StatusOK)
	for _, field := range []string{"tenant", "flow", "correlation_id", "limit"} {
		if !strings.Contains(body, `<input name="`+field+`"`) {
			t.Fatalf("the Journal page's form has no field %q:\n%s", field, body)
		}
	}

	for _, tc := range []struct {
		tenant, flow, cid string
		want              []string
	}{
		{"", "", "", []string{"corr-3", "corr-2", "corr-1"}}, // Show pressed with nothing typed
		{"acme", "", "", []string{"corr-2", "corr-1"}},
		{"acme", "echo", "", []string{"corr-1"}},
		{"", "", "corr-2", []string{"corr-2"}},
	} {
		// the query a browser builds from the form: every field, in order
		query := "tenant=" + url.QueryEscape(tc.tenant) + "&flow=" + url.QueryEscape(tc.flow) +
			"&correlation_id=" + url.QueryEscape(tc.cid) + "&limit=100"
		w := fx.admin(http.MethodGet, "/ui/journal?"+query)
		body := wantPage(t, w, http.StatusOK)
		var got []string
		for _, m := range corrs.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, tc.want) {
			alert := ""
			if m := regexp.MustCompile(`role="alert">([^<]*)`).FindStringSubmatch(body); m != nil {
				alert = m[1]
			}
			t.Errorf("the form sent as %q: %d, rows %v, want 200 and %v (alert: %q)", query, w.Code, got, tc.want, alert)
		}
	}
}
