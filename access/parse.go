package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/nexushq/nexus/lineerr"
	"github.com/nexushq/nexus/naming"
)

// entryFields are the fields of one entry of keys:, in the order Entry
// writes them.
var entryFields = []string{"id", "tenant", "sha256", "flows", "rate", "burst"}

// emptyFile is the error of a file with no document, or an empty one.
const emptyFile = "the file is empty: write keys: with a list of keys (keys: [] lets nobody call)"

// emptyHash is the SHA-256 of the empty string, which is never a key.
var emptyHash = sha256.Sum256(nil)

// Parse parses and validates an access.yaml. path is used in error messages
// only. On any error it returns a nil *Set and an ErrorList holding every
// error of the file, sorted by line.
func Parse(path string, data []byte) (*Set, error) {
	canon := canonical(data)
	p := &parser{path: path, src: canon}
	keys := p.parse()
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, p.errs
	}
	s := &Set{keys: keys, byHash: make(map[[32]byte]int, len(keys)), source: canon}
	for i, k := range keys {
		s.byHash[k.Hash] = i
	}
	return s, nil
}

// canonical drops a leading UTF-8 byte order mark and turns CRLF into LF;
// line numbers do not change. It never modifies data.
func canonical(data []byte) []byte {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if bytes.IndexByte(data, '\r') < 0 {
		return slices.Clone(data)
	}
	return bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
}

type parser struct {
	path string
	src  []byte
	errs ErrorList
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// parse reads the document and returns its keys; errors go to p.errs.
func (p *parser) parse() []Key {
	dec := yaml.NewDecoder(bytes.NewReader(p.src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(1, "%s", emptyFile)
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		p.errorf(max(more.Line, 1), "a second YAML document starts here: access.yaml holds one document")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		p.errorf(1, "%s", emptyFile)
		return nil
	}
	top := doc.Content[0]
	// YAML's non-specific tag ! (`! 5`), which the library drops, is a
	// tag like any other: refused where a tag is
	lineerr.MarkNonSpecificTags(top, strings.Split(string(p.src), "\n"))
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		p.errorf(1, "%s", emptyFile)
		return nil
	}
	if top.Kind != yaml.MappingNode || lineerr.Tagged(top) {
		// `--- !foo` tags the whole document: refused as a tag on any
		// other value of the file is
		p.errorf(top.Line, "the file must be a mapping with a keys: list, not %s", tagged(top))
		return nil
	}
	var list *yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			// a complex key (? [a]) names nothing
			p.errorf(k.Line, "a top-level key is a name, not %s", describe(k))
			continue
		}
		if lineerr.Tagged(k) {
			p.errorf(k.Line, "a top-level key is a name, not %s", tagged(k))
		}
		if first, dup := seen[k.Value]; dup {
			p.errorf(k.Line, "%s is set twice (first at line %d)", quoteName(k.Value), first)
			continue
		}
		seen[k.Value] = k.Line
		if k.Value != "keys" {
			if hint := naming.Suggest(k.Value, []string{"keys"}); hint != "" {
				p.errorf(k.Line, "unknown top-level key %s%s", quoteName(k.Value), hint)
			} else {
				p.errorf(k.Line, "unknown top-level key %s: the only one is keys", quoteName(k.Value))
			}
			continue
		}
		list = v
		if lineerr.Tagged(v) {
			p.errorf(k.Line, "keys must be a list of keys, not %s", tagged(v))
			list = nil
		} else if v.Kind != yaml.SequenceNode {
			p.errorf(k.Line, "keys must be a list of keys, not %s (keys: [] lets nobody call)", describe(v))
			list = nil
		}
	}
	if _, ok := seen["keys"]; !ok {
		p.errorf(1, "no keys: list: write keys: with a list of keys (keys: [] lets nobody call)")
	}
	if list == nil {
		return nil
	}
	keys := make([]Key, 0, len(list.Content))
	ids := map[string]int{}
	hashes := map[[32]byte]*parsedKey{}
	for _, e := range list.Content {
		k, ok := p.entry(e)
		if !ok {
			continue
		}
		if k.ID != "" {
			if first, dup := ids[k.ID]; dup {
				p.errorf(k.Line, "duplicate id %s (first used at line %d)", lineerr.Quote(k.ID), first)
				ok = false
			} else {
				ids[k.ID] = k.Line
			}
		}
		if first := hashes[k.Hash]; first != nil && k.hashLine > 0 {
			p.errorf(k.hashLine, "sha256 is already the hash of %s (line %d): two entries cannot share one key", who(first), first.Line)
			ok = false
		} else if k.hashLine > 0 {
			hashes[k.Hash] = k
		}
		if ok && k.valid {
			keys = append(keys, k.Key)
		}
	}
	return keys
}

// parsedKey is a Key being read, with what the file-wide checks need.
type parsedKey struct {
	Key
	hashLine int  // line of sha256:, 0 when it was missing or invalid
	valid    bool // every field was valid
}

// entry reads one item of keys:. ok is false when the item is not a
// mapping; otherwise the fields read (ID empty when invalid) are returned
// for the file-wide checks, with valid set when the whole entry is.
func (p *parser) entry(e *yaml.Node) (k *parsedKey, ok bool) {
	if e.Kind != yaml.MappingNode || lineerr.Tagged(e) {
		p.errorf(e.Line, "each entry of keys must be a mapping with id, tenant, sha256 and flows, not %s", tagged(e))
		return nil, false
	}
	before := len(p.errs)
	k = &parsedKey{Key: Key{Line: e.Line}}
	fields := map[string]*yaml.Node{}
	keyLines := map[string]int{}
	for i := 0; i+1 < len(e.Content); i += 2 {
		name, v := e.Content[i], e.Content[i+1]
		if name.Kind != yaml.ScalarNode {
			// a complex key (? [a]) names no field
			p.errorf(name.Line, "a field of a key entry is a name, not %s", describe(name))
			continue
		}
		if lineerr.Tagged(name) {
			// `! id: a`: refused, the field read all the same
			p.errorf(name.Line, "a field of a key entry is a name, not %s", tagged(name))
		}
		if first, dup := keyLines[name.Value]; dup {
			p.errorf(name.Line, "field %s is set twice (first at line %d)", quoteName(name.Value), first)
			continue
		}
		keyLines[name.Value] = name.Line
		if name.Tag == "!!merge" {
			p.errorf(name.Line, "%s (a YAML merge key) is not read in a key entry: write each field of the entry", lineerr.Quote(name.Value))
			continue
		}
		if !slices.Contains(entryFields, name.Value) {
			if hint := naming.Suggest(name.Value, entryFields); hint != "" {
				p.errorf(name.Line, "unknown field %s in a key entry%s", quoteName(name.Value), hint)
			} else {
				p.errorf(name.Line, "unknown field %s in a key entry: the fields are id, tenant, sha256, flows, rate and burst", quoteName(name.Value))
			}
			continue
		}
		fields[name.Value] = v
	}
	p.id(k, keyLines["id"], fields["id"])
	tenant := p.tenant(k, keyLines["tenant"], fields["tenant"])
	p.hash(k, keyLines["sha256"], fields["sha256"])
	p.flows(k, tenant, keyLines["flows"], fields["flows"])
	p.rate(k, keyLines, fields)
	k.valid = len(p.errs) == before
	return k, true
}

// who names an entry in a message about it: its id when it has a valid one.
func who(k *parsedKey) string {
	if k.ID != "" {
		return "key " + lineerr.Quote(k.ID)
	}
	return "the key entry"
}

func (p *parser) id(k *parsedKey, line int, v *yaml.Node) {
	switch {
	case v == nil:
		p.errorf(k.Line, "the key entry has no id: add id: NAME (the name of the key in logs, e.g. acme-orders)")
	case !isScalar(v) || lineerr.Tagged(v):
		p.errorf(line, "id must be a name, not %s", tagged(v))
	case holdsKey(v.Value):
		// Never echo it: it is likely a key (perhaps with its "Bearer "),
		// and errors are logged.
		p.errorf(line, "id holds %s like an API key: ids appear in logs, so give the key a name such as acme-orders", KeyPrefix)
	default:
		if reason, bad := nameReason(v.Value); bad {
			p.errorf(line, "invalid id %s: %s", lineerr.Quote(v.Value), reason)
			return
		}
		k.ID = v.Value
	}
}

// nameReason returns why name breaks the name rule, in the rule's own words.
func nameReason(name string) (string, bool) {
	var ne *naming.Error
	if err := naming.Check(name, naming.Field{}); errors.As(err, &ne) {
		return ne.Reason, true
	}
	return "", false
}

// tenantField is the pair a tenant of access.yaml is checked as: a key is
// for a tenant and any of its flows, so the flow is "*".
var tenantField = naming.Tenant("*")

func (p *parser) tenant(k *parsedKey, line int, v *yaml.Node) string {
	switch {
	case v == nil:
		p.errorf(k.Line, "%s has no tenant: add tenant: NAME", who(k))
		return ""
	case !isScalar(v) || lineerr.Tagged(v):
		p.errorf(line, "tenant must be a name, not %s", tagged(v))
		return ""
	}
	if holdsKey(v.Value) {
		// never echoed, here or in the errors of the entry's flows, which
		// name the tenant: it is a key (perhaps with its "Bearer ")
		p.errorf(line, "tenant holds an API key, not a tenant's name: replace the key, which is now in the repository")
		return ""
	} else if err := naming.Check(v.Value, tenantField); err != nil {
		p.errorf(line, "%s", err)
	} else {
		k.Tenant = v.Value
	}
	return v.Value
}

func (p *parser) hash(k *parsedKey, line int, v *yaml.Node) {
	const want = "sha256 must be the 64 hexadecimal characters of the key's SHA-256"
	switch {
	case v == nil:
		p.errorf(k.Line, "%s has no sha256: add the hex SHA-256 of the key (nexus key generate prints the entry)", who(k))
		return
	case !isScalar(v) || lineerr.Tagged(v):
		p.errorf(line, "%s, not %s", want, tagged(v))
		return
	case holdsKey(v.Value):
		// Never echo the value: it is a key.
		p.errorf(line, "sha256 holds an API key, not its hash: commit the hash instead (nexus key generate prints the entry) and replace the key, which is now in the repository")
		return
	}
	// The value is not echoed either: it may be a key of another shape.
	if n := len(v.Value); n != 2*sha256.Size {
		p.errorf(line, "%s, not %d characters", want, n)
		return
	}
	var sum [32]byte
	if _, err := hex.Decode(sum[:], []byte(v.Value)); err != nil {
		pos := strings.IndexFunc(v.Value, func(r rune) bool { return !isHex(r) }) + 1
		p.errorf(line, "%s: the character at position %d is not 0-9, a-f or A-F", want, pos)
		return
	}
	if sum == emptyHash {
		p.errorf(line, "sha256 is the SHA-256 of the empty string, which is never a key")
		return
	}
	k.Hash = sum
	k.hashLine = line
}

func isHex(r rune) bool { return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' }

func (p *parser) flows(k *parsedKey, tenant string, line int, v *yaml.Node) {
	switch {
	case v == nil:
		p.errorf(k.Line, "%s has no flows: add flows: [NAME, …], or flows: [\"*\"] for every flow of the tenant", who(k))
		return
	case v.Kind != yaml.SequenceNode || lineerr.Tagged(v):
		p.errorf(line, "flows must be a list, e.g. [order-intake] or [\"*\"], not %s", tagged(v))
		return
	case len(v.Content) == 0:
		p.errorf(line, "flows is empty: list the flows the key may call, or [\"*\"] for every flow of the tenant")
		return
	}
	var names []string
	listed := make(map[string]bool, len(v.Content)) // names seen: a long list is checked in linear time
	star := false
	for _, f := range v.Content {
		switch {
		case !isScalar(f) || lineerr.Tagged(f):
			p.errorf(f.Line, "each flow must be a name, not %s", tagged(f))
			continue
		case holdsKey(f.Value):
			// never echoed, twice or not: it is a key
			p.errorf(f.Line, "flows holds an API key, not a flow's name: replace the key, which is now in the repository")
			continue
		case listed[f.Value] || f.Value == "*" && star:
			p.errorf(f.Line, "flows lists %s twice", lineerr.Quote(f.Value))
			continue
		case f.Value == "*":
			star = true
		default:
			field := naming.Flow(tenant)
			field.Alone = tenant == "" // a tenant refused unquoted stays so
			if err := naming.Check(f.Value, field); err != nil {
				p.errorf(f.Line, "%s", err)
			}
		}
		if f.Value != "*" {
			names = append(names, f.Value)
			listed[f.Value] = true
		}
	}
	if star && len(names) > 0 {
		p.errorf(line, "flows mixes \"*\" (every flow) with flow names: write either [\"*\"] or the names")
		return
	}
	if star {
		k.AllFlows = true
	} else {
		k.Flows = names
		if len(names) >= setFrom {
			k.flowSet = listed // the names, and only them
		}
	}
}

func (p *parser) rate(k *parsedKey, lines map[string]int, fields map[string]*yaml.Node) {
	rateNode, burstNode := fields["rate"], fields["burst"]
	if rateNode != nil {
		line := lines["rate"]
		var rate float64
		wide, isBig := lineerr.Past64Bits(rateNode) // 0x1ffffffffffffffff: YAML reads it as a string
		if isBig {
			rate, _ = new(big.Float).SetInt(wide).Float64()
		}
		switch {
		case lineerr.LeadingZero("rate", rateNode) != "":
			p.errorf(line, "%s", lineerr.LeadingZero("rate", rateNode))
		case lineerr.PastFloat(rateNode) && strings.HasPrefix(rateNode.Value, "-"):
			p.errorf(line, "rate must be more than 0, not %s: leave rate out for no limit", lineerr.Clip(rateNode.Value))
		case lineerr.PastFloat(rateNode):
			p.errorf(line, "rate %s is too large: leave rate out for no limit", lineerr.Clip(rateNode.Value))
		case isBig && rate <= 0:
			p.errorf(line, "rate must be more than 0, not %s: leave rate out for no limit", lineerr.Clip(rateNode.Value))
		case isBig && math.IsInf(rate, 0):
			p.errorf(line, "rate %s is too large: leave rate out for no limit", lineerr.Clip(rateNode.Value))
		case isBig:
			// not written plainly, as 0x10 is not
			p.errorf(line, "%s", lineerr.NotPlainNumber("rate", rate, rateNode.Value))
		case !isScalar(rateNode) || rateNode.Tag != "!!int" && rateNode.Tag != "!!float" || rateNode.Decode(&rate) != nil || math.IsNaN(rate) || math.IsInf(rate, 0):
			p.errorf(line, "rate must be a number of requests per second, not %s", describe(rateNode))
		case rate <= 0:
			p.errorf(line, "rate must be more than 0, not %s: leave rate out for no limit", lineerr.Clip(rateNode.Value))
		case !lineerr.PlainNumber(rateNode.Value):
			// +5, 0x10, 1_000, .5, 1.: YAML reads them as numbers, a flow's
			// front matter refuses them, and a reader may not see the
			// number YAML does
			p.errorf(line, "%s", lineerr.NotPlainNumber("rate", rate, rateNode.Value))
		default:
			k.Rate = rate
			k.Burst = defaultBurst(rate)
		}
	}
	if burstNode == nil {
		return
	}
	line := lines["burst"]
	var burst int
	switch {
	case rateNode == nil:
		p.errorf(line, "burst without rate does nothing: add rate (requests per second), or remove burst")
	case lineerr.LeadingZero("burst", burstNode) != "":
		p.errorf(line, "%s", lineerr.LeadingZero("burst", burstNode))
	case (lineerr.PastInt(burstNode) || isPast64Bits(burstNode)) && strings.HasPrefix(burstNode.Value, "-"):
		p.errorf(line, "burst must be at least 1, not %s", lineerr.Clip(burstNode.Value))
	case lineerr.PastInt(burstNode) || isPast64Bits(burstNode):
		// 99999999999999999999, which YAML reads as a float, and
		// 0x1ffffffffffffffff, which it reads as a string
		p.errorf(line, "burst %s is too large: at most %d", lineerr.Clip(burstNode.Value), math.MaxInt)
	case !isScalar(burstNode) || burstNode.Tag != "!!int" || burstNode.Decode(&burst) != nil:
		p.errorf(line, "burst must be a whole number, not %s", describe(burstNode))
	case burst < 1:
		// as written: +0 and -0x5 are below the least, however written
		p.errorf(line, "burst must be at least 1, not %s", lineerr.Clip(burstNode.Value))
	case !lineerr.PlainWhole(burstNode.Value):
		// +5, 0x10, 1_000: refused as a flow's whole-number keys refuse them
		p.errorf(line, "%s", lineerr.NotPlainWhole("burst", int64(burst), burstNode.Value))
	case k.Rate > 0:
		k.Burst = burst
	}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError reports a YAML syntax error at its line (line 1 when the
// parser gives none), with a hint for an unquoted "*".
func (p *parser) yamlError(err error) {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
		// the reader's errors (a control character, bytes that are not
		// UTF-8) name no line: it is the line of the first such character
		line = max(refusedLine(p.src), 1)
	}
	hint := ""
	if text := p.line(line); strings.Contains(text, "*") && !strings.Contains(text, `"*"`) && !strings.Contains(text, `'*'`) {
		hint = ` (a bare * is a YAML alias: write flows: ["*"])`
	}
	p.errorf(max(line, 1), "not valid YAML: %s%s", msg, hint)
}

// refusedLine returns the line (1-based) of the first character of src
// that the YAML reader refuses, 0 when there is none: bytes that are not
// UTF-8, or a character outside YAML's printable set (a control character
// other than tab, line feed and carriage return; a surrogate; U+FFFE and
// U+FFFF).
func refusedLine(src []byte) int {
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRune(src[i:])
		printable := r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7e || r == 0x85 ||
			r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff
		if r == utf8.RuneError && size <= 1 || !printable {
			return bytes.Count(src[:i], []byte("\n")) + 1
		}
		i += size
	}
	return 0
}

// line returns line n (1-based) of the source, or "".
func (p *parser) line(n int) string {
	lines := strings.Split(string(p.src), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// isPast64Bits reports whether n is a hex, octal or binary number past 64
// bits written plainly (lineerr.Past64Bits).
func isPast64Bits(n *yaml.Node) bool {
	_, ok := lineerr.Past64Bits(n)
	return ok
}

func isScalar(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag != "!!null" }

// holdsKey reports whether a value of the file holds an API key, alone or
// not ("Bearer nxk_…", pasted from a header): such a value is never quoted.
func holdsKey(s string) bool { return strings.Contains(s, KeyPrefix) }

// describe is lineerr.Describe, but a string that is an API key is never
// echoed: errors reach logs, /status and the UI.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && holdsKey(n.Value) {
		return "an API key (replace it: it is now in the repository)"
	}
	if lineerr.Tagged(n) && holdsKey(n.Tag) {
		return "a value tagged with an API key (replace it: it is now in the repository)"
	}
	return lineerr.Describe(n)
}

// tagged is describe, but a value written with a YAML tag (lineerr.Tagged:
// `!foo x`, `! x`) is named by its tag: "a value tagged !foo", as a flow's
// front matter names it.
func tagged(n *yaml.Node) string {
	if !lineerr.Tagged(n) {
		return describe(n)
	}
	if holdsKey(n.Tag) {
		return "a value tagged with an API key (replace it: it is now in the repository)"
	}
	return "a value tagged " + lineerr.Clip(n.Tag)
}

// quoteName quotes a name of the file for an error, but never an API key
// pasted as one.
func quoteName(name string) string {
	if holdsKey(name) {
		return "(an API key: replace it, it is now in the repository)"
	}
	return lineerr.Quote(name)
}
