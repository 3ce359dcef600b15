package access

import "github.com/nexushq/nexus/lineerr"

// Error is one error of an access.yaml: a file, a line (1-based) and a
// message.
type Error = lineerr.Error

// ErrorList is every error of one access.yaml, in line order. Parse returns
// it as its error; its text is one "PATH:LINE: message" line per error.
type ErrorList = lineerr.List
