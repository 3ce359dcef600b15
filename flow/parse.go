package flow

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nexushq/nexus/naming"
)

// Canonical returns the canonical form of a flow file's bytes: a leading
// UTF-8 byte order mark removed and CRLF line endings turned into LF. Line
// numbers are the same in both forms.
func Canonical(src []byte) []byte {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	if bytes.IndexByte(src, '\r') < 0 {
		return src
	}
	return bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
}

// IsFlowFile reports whether a Markdown file is a flow file: it starts with
// a `---` line and its front matter has flowmarkdown_version. Other Markdown
// (a README) is not compiled.
func IsFlowFile(src []byte) bool {
	lines := strings.Split(string(Canonical(src)), "\n")
	if len(lines) == 0 || strings.TrimRight(lines[0], " \t") != "---" {
		return false
	}
	for i, l := range lines[1:] {
		if t := strings.TrimRight(l, " \t"); t == "---" || t == "..." {
			// no line starts with the key: a front matter written in
			// YAML's flow style ({flowmarkdown_version: "0.1", …}) may
			// still hold it
			return hasVersionKey(strings.Join(lines[1:i+1], "\n"))
		}
		if versionLine.MatchString(l) {
			return true
		}
	}
	return false
}

// SkippedAsNotFlow says why Markdown that is not a flow file looks meant
// to be one, or "" when it does not (a flow file included): its front
// matter, opening the file, has a key one or two letters from
// flowmarkdown_version, or names a flow and a tenant without it; or it is
// a Git LFS pointer, whose content git keeps outside the repo. Such a
// file is skipped as any Markdown is (a README), so a typo in the one key
// that makes a file a flow file left a new flow silently undeployed;
// nexus validate and deploy warn with this, and git sync logs it.
func SkippedAsNotFlow(src []byte) string {
	if bytes.HasPrefix(src, []byte(lfsPointer)) {
		return "it is a Git LFS pointer: its content is kept outside the repo, and git sync reads the repo only (keep flow files out of LFS: see .gitattributes)"
	}
	lines := strings.Split(string(Canonical(src)), "\n")
	if len(lines) == 0 || strings.TrimRight(lines[0], " \t") != "---" || IsFlowFile(src) {
		return ""
	}
	var named []string
	for _, l := range lines[1:] {
		if t := strings.TrimRight(l, " \t"); t == "---" || t == "..." {
			break
		}
		m := topLevelKey.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if naming.Suggest(m[1], []string{"flowmarkdown_version"}) != "" {
			return fmt.Sprintf("its front matter has %s, not flowmarkdown_version", m[1])
		}
		if m[1] == "flow" || m[1] == "tenant" {
			named = append(named, m[1])
		}
	}
	if len(named) == 2 {
		return "its front matter names a flow and a tenant but has no flowmarkdown_version"
	}
	return ""
}

// lfsPointer opens a Git LFS pointer file (the spec's first line).
const lfsPointer = "version https://git-lfs.github.com/spec/v1\n"

// topLevelKey is a front matter line that starts a top-level key.
var topLevelKey = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)\s*:`)

// hasVersionKey reports whether a front matter written in YAML's flow
// style (a mapping in braces) has the key flowmarkdown_version at its top
// level. One that does not parse is a flow file when the key follows a
// brace or a comma, so that Compile reports its YAML error rather than
// the file being skipped.
func hasVersionKey(frontMatter string) bool {
	if t := leadingProperties.ReplaceAllString(strings.TrimSpace(frontMatter), ""); !strings.HasPrefix(t, "{") || !strings.Contains(t, "flowmarkdown_version") {
		return false // most Markdown: no YAML to parse
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(frontMatter), &doc); err != nil {
		return flowStyleKey.MatchString(frontMatter)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "flowmarkdown_version" {
			return true
		}
	}
	return false
}

// leadingProperties are the YAML tags and anchors a value may begin with
// (`! {…}`, `&fm !!map {…}`): a front matter in braces so written is one in
// flow style too, whose tag the compiler refuses (`!!map` aside).
var leadingProperties = regexp.MustCompile(`^(?:(?:![^\s,\[\]{}]*|&[^\s,\[\]{}]+)\s*)+`)

// flowStyleKey is the key after a brace or a comma, bare or quoted.
var flowStyleKey = regexp.MustCompile(`[{,]\s*("flowmarkdown_version"|'flowmarkdown_version'|flowmarkdown_version)\s*:`)

// versionLine is the key at the start of a line, bare or quoted as YAML
// allows.
var versionLine = regexp.MustCompile(`^(flowmarkdown_version|"flowmarkdown_version"|'flowmarkdown_version')\s*:`)

// rawFile is a flow file cut into its parts, before any key is read.
type rawFile struct {
	closed          bool   // the front matter has its closing line
	frontMatter     string // the YAML between the --- lines
	frontMatterLine int    // line of the first YAML line
	sections        []*rawSection
}

type rawSection struct {
	fault  bool
	name   string
	line   int
	keys   []rawKey
	block  *rawBlock
	blocks int
}

type rawKey struct {
	key, value string
	line       int
}

type rawBlock struct {
	info string
	line int    // line of the opening fence
	body string // the lines between the fences
}

var (
	// headings as Markdown reads them: up to three spaces before, a
	// closing sequence of #s after (`## Step: check ##`) not the name's
	sectionHeading = regexp.MustCompile(`^ {0,3}##[ \t]+(Step|Fault):(.*?)(?:[ \t]+#+)?[ \t]*$`)
	looseHeading   = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]*(?i:step|fault)[ \t]*[0-9]*[ \t]*:`)
	anyHeading     = regexp.MustCompile(`^ {0,3}(#{1,6})([ \t]|$)`)
	keyLine        = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]+(.*?))?[ \t]*$`)
	fenceOpen      = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})[ \t]*([^ \t`]*)")
	commentOpen    = regexp.MustCompile(`^ {0,3}<!--`)
)

// split cuts a canonical flow file into front matter and sections. Errors
// are added to c.
func (c *compiler) split(src string) *rawFile {
	lines := strings.Split(src, "\n")
	f := &rawFile{frontMatterLine: 2}
	end := -1
	for i := 1; i < len(lines); i++ {
		if t := strings.TrimRight(lines[i], " \t"); t == "---" || t == "..." {
			end = i
			break
		}
	}
	if end < 0 {
		c.errorf(1, "the front matter is not closed: end it with a line holding only ---")
		return f
	}
	f.closed = true
	f.frontMatter = strings.Join(lines[1:end], "\n")

	var cur *rawSection
	keysOpen := false // still reading the key lines right under a heading
	seenFault := false
	for i := end + 1; i < len(lines); i++ {
		line, n := lines[i], i+1
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence, info := m[1], m[2]
			j := i + 1
			for ; j < len(lines) && !closesFence(lines[j], fence); j++ {
			}
			if j == len(lines) {
				c.errorf(n, "the fenced block opened here is not closed")
				return f
			}
			if cur != nil {
				keysOpen = false
				switch info {
				case "ntd", "validate", "condition":
					cur.blocks++
					if cur.blocks == 2 {
						c.errorf(n, "step %s has a second fenced block: a step has at most one (ntd, validate or condition)", quoted(cur.name))
					} else if cur.block == nil {
						indent := len(line) - len(strings.TrimLeft(line, " "))
						cur.block = &rawBlock{info: info, line: n, body: blockBody(lines[i+1:j], indent)}
					}
				case "":
					c.errorf(n, "fenced block without a kind in step %s: write ```ntd, ```validate or ```condition", quoted(cur.name))
				default:
					c.errorf(n, "unknown fenced block %s in step %s: a step's block is ntd, validate or condition (documentation goes under its own heading)", quoted(info), quoted(cur.name))
				}
			}
			i = j
			continue
		}
		if loc := commentOpen.FindStringIndex(line); loc != nil {
			// an HTML comment (CommonMark's HTML block of kind 2), up to
			// the line holding -->: hidden in the rendered file, so
			// nothing in it is a section or a key
			j := i
			for ; j < len(lines); j++ {
				from := 0
				if j == i {
					from = loc[0] // <!--> and <!---> close on their line
				}
				if strings.Contains(lines[j][from:], "-->") {
					break
				}
			}
			if j == len(lines) {
				c.errorf(n, "the HTML comment opened here is not closed: end it with -->")
				return f
			}
			i = j
			continue
		}
		if m := sectionHeading.FindStringSubmatch(line); m != nil {
			cur = &rawSection{fault: m[1] == "Fault", name: strings.TrimSpace(m[2]), line: n}
			if cur.fault {
				seenFault = true
			} else if seenFault {
				c.errorf(n, "## Step: %s comes after a ## Fault: section: steps come first, the fault sequence last", quoted(cur.name))
			}
			f.sections = append(f.sections, cur)
			keysOpen = true
			continue
		}
		if looseHeading.MatchString(line) {
			c.errorf(n, "a step heading is written `## Step: NAME` or `## Fault: NAME`")
			cur, keysOpen = nil, false
			continue
		}
		if anyHeading.MatchString(line) {
			cur, keysOpen = nil, false // documentation, up to the next section
			continue
		}
		if cur == nil {
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		badHeader := ""
		if m == nil {
			badHeader = badHeaderKeyError(line)
		}
		switch {
		case keysOpen && m != nil:
			cur.keys = append(cur.keys, rawKey{key: m[1], value: stripComment(m[2]), line: n})
		case keysOpen && strings.TrimSpace(line) == "" && len(cur.keys) == 0:
			// blank lines between the heading and the first key
		case badHeader != "":
			// a header name the key line's pattern does not take (x/y,
			// é), under the heading or not: read as prose, the header
			// would be silently missing from the answer
			c.errorf(n, "%s", badHeader)
		case keysOpen && looseKey.MatchString(line):
			c.errorf(n, "step key line %s: write `key: value` at the start of the line, with a space after the colon", quoted(strings.TrimSpace(line)))
			keysOpen = false
		case m != nil && isStepKey(m[1]):
			keysOpen = false
			c.errorf(n, "key %s is not directly under the heading of step %s: write the keys right after the heading, with no blank line, before the block", m[1], quoted(cur.name))
		default:
			keysOpen = false
		}
	}
	return f
}

// blockBody joins a block's lines, each with up to indent leading spaces
// removed: those of the opening fence, as CommonMark reads an indented
// block.
func blockBody(lines []string, indent int) string {
	if indent == 0 {
		return strings.Join(lines, "\n")
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		n := 0
		for n < indent && n < len(l) && l[n] == ' ' {
			n++
		}
		out[i] = l[n:]
	}
	return strings.Join(out, "\n")
}

// closesFence reports whether line closes a block opened by fence: as
// CommonMark reads it, up to three spaces, the fence's character at least
// as many times, then only blanks. A line indented further (four spaces,
// a tab) is the block's content.
func closesFence(line, fence string) bool {
	t := strings.TrimRight(line, " \t")
	body := strings.TrimLeft(t, " ")
	return len(t)-len(body) <= 3 && len(body) >= len(fence) && strings.Trim(body, fence[:1]) == ""
}

// headerKeyLine is a line that begins as a response or fault header key,
// up to its colon.
var headerKeyLine = regexp.MustCompile(`^((?:response|fault)_header_[^:]*?)[ \t]*:`)

// badHeaderKeyError is the error of line when it is a response or fault
// header key whose name holds a character keyLine does not take, else "".
// A name keys can spell (written without the space after the colon, say)
// is left to the other rules.
func badHeaderKeyError(line string) string {
	m := headerKeyLine.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	key := m[1]
	_, suffix, _ := strings.Cut(key, "_header_")
	if !strings.ContainsFunc(suffix, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return ""
	}
	if err := CheckHeaderName(headerFromKey(suffix)); err != nil {
		return fmt.Sprintf("step key %s: %s", clipped(key), err)
	}
	return fmt.Sprintf("step key %s: a key's name holds only letters, digits, _ and -", clipped(key))
}

// looseKey is a line that looks like a step key but is not written as one
// (indented, or no space after the colon).
var looseKey = regexp.MustCompile(`^(?:[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*:|[A-Za-z_][A-Za-z0-9_]*:[^ \t/])`)

// stripComment removes a YAML comment (whitespace, then #) from a value,
// outside quotes.
func stripComment(v string) string {
	var quote byte
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" \t[{,:", v[i-1]) >= 0):
			// a quote opens a string where a YAML scalar may begin, not
			// inside a word (don't)
			quote = c
		case c == '#' && i > 0 && (v[i-1] == ' ' || v[i-1] == '\t'):
			return strings.TrimRight(v[:i], " \t")
		}
	}
	return v
}
