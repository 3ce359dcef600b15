package gitsync_test

import (
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
)

// TestC1ControlInAFileName: a name with a C1 control character (U+009B,
// the one-character form of ESC [) is refused and quoted, as C0 ones are.
func TestC1ControlInAFileName(t *testing.T) {
	e := newEnv(t)
	e.deployed()
	e.src.write("flows/acme/\u009b31mevil.md", flowtest.Marked("acme", "evil", "escaped"))
	e.src.commit("a C1 control in a name")
	e.mustRefuse(`"flows/acme/\u009b31mevil.md": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only`)
}
