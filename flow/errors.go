package flow

import "github.com/nexushq/nexus/lineerr"

// Error is one compile error: a file, a line (1-based) and a message.
type Error = lineerr.Error

// ErrorList is every compile error of one file, in line order. Compile
// returns it as its error.
type ErrorList = lineerr.List
