package flow

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"unicode/utf8"
)

// deniedHeaders are the hop-by-hop and framing headers no flow may set,
// neither on its answer nor on an outbound request.
var deniedHeaders = map[string]bool{
	"connection": true, "content-length": true, "host": true, "keep-alive": true,
	"proxy-connection": true, "te": true, "trailer": true, "transfer-encoding": true,
	"upgrade": true,
}

// ReservedHeaderPrefix starts the headers only the platform writes, such as
// X-Nexus-Idempotent-Replay.
const ReservedHeaderPrefix = "x-nexus-"

// CheckHeaderName is the header deny list: it returns nil when a flow may
// set the header name (on its answer or an outbound request), else an error
// saying why not. It is the one place the list is applied.
func CheckHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("a header name is empty")
	}
	for _, r := range name {
		if r >= utf8.RuneSelf || !isTokenChar(byte(r)) {
			return fmt.Errorf("header name %s has the character %q, which a header name cannot hold", quoted(name), r)
		}
	}
	// an underscore is checked as a hyphen: the step keys turn one into
	// the other, and so do many servers (CGI's HTTP_ variables), so
	// Keep_Alive and X_Nexus_Replay are refused as their hyphened names are
	lower := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	if deniedHeaders[lower] {
		return fmt.Errorf("header %s is managed by the HTTP layer: a flow cannot set or remove it", clipped(displayName(name)))
	}
	if strings.HasPrefix(lower, ReservedHeaderPrefix) {
		return fmt.Errorf("header %s is reserved for the platform (the x-nexus- prefix): a flow cannot set or remove it", clipped(displayName(name)))
	}
	return nil
}

// displayName writes a header name the way the HTTP specifications do
// (one with an underscore as it is written).
func displayName(name string) string {
	if strings.Contains(name, "_") {
		return name
	}
	if strings.EqualFold(name, "te") {
		return "TE"
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// headerFromKey turns the suffix of a response_header_<name> key into the
// header name: underscores become hyphens and each segment is capitalised
// (x_correlation_id → X-Correlation-Id).
func headerFromKey(suffix string) string {
	return textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(suffix, "_", "-"))
}

// hasEmptySegment reports whether a header name written from a key or a
// response_header_remove entry (underscores made hyphens) has an empty
// segment: a leading, trailing or doubled hyphen (-X, X-, X--Y), which no
// header's name has and a typing slip makes.
func hasEmptySegment(name string) bool {
	return slices.Contains(strings.Split(name, "-"), "")
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
