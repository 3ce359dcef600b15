package access

import (
	"fmt"
	"strings"
)

// Error is one error of an access.yaml: a file, a line (1-based) and a
// message.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ErrorList is every error of one access.yaml, in line order. Parse returns
// it as its error; its text is one "PATH:LINE: message" line per error.
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
