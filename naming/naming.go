// Package naming holds the one rule for a name that becomes a path: a tenant, a
// flow, or the queue of a queue_publish step. Every entry point that turns a
// name into a directory (the compiler, the HTTP doors, queue directory
// creation, the dlq commands, the UI) calls Check, so the rule and its error
// text live in exactly one place. It also gives the "did you mean" hint
// (Suggest) that the compiler and the access.yaml parser add to an unknown
// key.
package naming

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxLen is the longest name the rule accepts, in characters.
const MaxLen = 64

// Field says which part of a (tenant, flow) pair a name is, and what the rest
// of the pair is, so that an error can name the whole pair.
type Field struct {
	// Kind is "tenant", "flow" or "queue".
	Kind string
	// Tenant and Flow are the other names of the pair as given; the one that
	// Kind names is ignored.
	Tenant, Flow string
	// Alone says the name was given without the other (a filter of a
	// listing: a tenant's flows, a flow of any tenant): the error says so
	// instead of quoting an empty other name.
	Alone bool
}

// Tenant describes a tenant name (of the pair with flow).
func Tenant(flow string) Field { return Field{Kind: "tenant", Flow: flow} }

// Flow describes a flow name (of the pair with tenant).
func Flow(tenant string) Field { return Field{Kind: "flow", Tenant: tenant} }

// Queue describes the queue of a queue_publish step in flow tenant/flow.
func Queue(tenant, flow string) Field { return Field{Kind: "queue", Tenant: tenant, Flow: flow} }

// Error is a name that breaks the rule. Its text is the one the user sees
// everywhere the rule runs.
type Error struct {
	Name   string
	Field  Field
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid name %s for %s (%s): %s", Quote(e.Name), e.Field.Kind, e.Field.other(), e.Reason)
}

func (f Field) other() string {
	switch {
	case f.Alone && f.Kind == "tenant":
		return "any flow"
	case f.Alone && f.Kind == "flow":
		return "any tenant"
	}
	switch f.Kind {
	case "tenant":
		return "flow " + Quote(f.Flow)
	case "flow":
		return "tenant " + Quote(f.Tenant)
	default:
		return "tenant " + Quote(f.Tenant) + ", flow " + Quote(f.Flow)
	}
}

// Quote quotes a name a caller gave (or any text of theirs: a media type)
// for an error; one longer than twice MaxLen characters is cut after MaxLen
// and followed by "…": a name in a URL may be as long as the server takes a
// request line, and the error is one line of an answer and of the log (a
// name of 60,000 characters made a 60 KB answer).
func Quote(name string) string {
	if short, cut := shorten(name); cut {
		return strconv.Quote(short) + "…"
	}
	return strconv.Quote(name)
}

// Shorten is name as a log line shows it, unquoted: whole, or cut as Quote
// cuts it and followed by "…". A name logged before it was checked (a
// refused request's) may be any length.
func Shorten(name string) string {
	if short, cut := shorten(name); cut {
		return short + "…"
	}
	return name
}

// shorten returns the first MaxLen characters of a name of more than twice
// MaxLen, and whether it cut.
func shorten(name string) (string, bool) {
	if utf8.RuneCountInString(name) <= 2*MaxLen {
		return name, false
	}
	n := 0
	for i := range name {
		if n == MaxLen {
			return name[:i], true
		}
		n++
	}
	return name, false
}

// Valid reports whether name follows the rule: 1 to MaxLen characters from
// a-z, 0-9, '-' and '_', starting with a letter or a digit.
func Valid(name string) bool {
	if len(name) == 0 || len(name) > MaxLen || !alnum(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !alnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// Check returns nil when name follows the rule, else an *Error naming the
// pair and the first character at fault (counted from 1, in characters).
func Check(name string, field Field) error {
	if Valid(name) {
		return nil
	}
	return &Error{Name: name, Field: field, Reason: reason(name)}
}

func reason(name string) string {
	if name == "" {
		return "the name is empty"
	}
	if n := utf8.RuneCountInString(name); n > MaxLen {
		return fmt.Sprintf("the name is %d characters long, more than %d", n, MaxLen)
	}
	pos := 0
	for i, r := range name {
		pos++
		if r < utf8.RuneSelf && (alnum(byte(r)) || i > 0 && (r == '-' || r == '_')) {
			continue
		}
		c := strconv.QuoteRune(r)
		if _, size := utf8.DecodeRuneInString(name[i:]); r == utf8.RuneError && size == 1 {
			c = fmt.Sprintf(`'\x%02x'`, name[i]) // not UTF-8: the byte, Go-style
		}
		return fmt.Sprintf("character %s at position %d is not allowed", c, pos)
	}
	return "the name is not allowed" // unreachable: Valid rejected it
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
