package gitsync

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// errorLines returns n errors, "e0" to "e{n-1}".
func errorLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("e%d", i)
	}
	return out
}

// TestCapErrors: a refused commit's errors are kept whole up to
// MaxReportedErrors lines; past it, the first MaxReportedErrors-1 and a
// line saying how many more there are.
func TestCapErrors(t *testing.T) {
	more := func(n int) string {
		return fmt.Sprintf("… and %d more errors (nexus validate on a checkout of the commit lists them all)", n)
	}
	for _, tc := range []struct {
		name string
		errs []string
		want []string
	}{
		{"none", nil, nil},
		{"one", errorLines(1), errorLines(1)},
		{"at the cap", errorLines(MaxReportedErrors), errorLines(MaxReportedErrors)},
		{"one over", errorLines(MaxReportedErrors + 1), append(errorLines(MaxReportedErrors-1), more(2))},
		{"30,000", errorLines(30000), append(errorLines(MaxReportedErrors-1), more(30000-MaxReportedErrors+1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, capErrors(tc.errs)); diff != "" {
				t.Errorf("capErrors (-want +got):\n%s", diff)
			}
		})
	}
}
