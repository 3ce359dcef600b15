package flow

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits of XML documents, owned here because encoding/xml has none.
const (
	XMLMaxDepth      = 64  // nesting of elements
	XMLMaxAttributes = 256 // attributes on one element
)

// XMLDocument is an XML document kept as XML: the answer of a backend that
// speaks XML. It is written out as the bytes received, and paths read its
// flattened form (see FlattenXML). It is immutable.
type XMLDocument struct {
	raw  []byte
	flat any
}

// Raw returns the document's bytes. The caller must not modify them.
func (d *XMLDocument) Raw() []byte { return d.raw }

// Flat returns the document flattened to a document value.
func (d *XMLDocument) Flat() any { return d.flat }

// ParseXMLDocument checks an XML document with the limits of FlattenXML
// and keeps it as XML.
func ParseXMLDocument(data []byte) (*XMLDocument, error) {
	flat, err := FlattenXML(data)
	if err != nil {
		return nil, err
	}
	return &XMLDocument{raw: bytes.Clone(data), flat: flat}, nil
}

// XMLError is a refused XML document.
type XMLError struct{ Msg string }

func (e *XMLError) Error() string { return "invalid XML: " + e.Msg }

func xmlErrorf(format string, args ...any) error {
	return &XMLError{Msg: fmt.Sprintf(format, args...)}
}

// FlattenXML turns an XML document into a document value: the root element
// is dropped, child elements become object keys (in order of first
// appearance), repeated siblings become an array, attributes become "@name"
// keys, text beside attributes or child elements becomes "#text", and a
// leaf's value is its text as a string. Names are local names (a namespace
// prefix is dropped; xmlns declarations are not kept).
//
// Refused: a DOCTYPE (so no entity can be declared or expanded), nesting
// deeper than XMLMaxDepth, more than XMLMaxAttributes attributes on an
// element, a duplicate attribute, more than one root element, text outside
// the root, an encoding other than UTF-8 (see IsUTF8Charset), and anything
// encoding/xml finds malformed. A document declared US-ASCII (see IsASCIICharset) is read as
// UTF-8, of which ASCII is a part, and refused when it holds a byte that is
// not ASCII. A UTF-8 byte order mark at the start is allowed (XML 1.0,
// 4.3.3) and skipped.
func FlattenXML(data []byte) (any, error) {
	sent := len(data)
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if name, ok := tooManyAttributes(data); ok {
		return nil, xmlErrorf("element <%s> has more than %d attributes", name, XMLMaxAttributes)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	dec.CharsetReader = func(label string, r io.Reader) (io.Reader, error) {
		if IsUTF8Charset(label) {
			// a name of UTF-8 encoding/xml does not know (utf8): read as
			// UTF-8, which the decoder checks
			return r, nil
		}
		if !IsASCIICharset(label) {
			return nil, xmlErrorf("encoding %q is not supported: send UTF-8", label)
		}
		if i := NonASCII(data); i >= 0 {
			// the byte named is the document's as sent, a byte order
			// mark counted
			return nil, xmlErrorf("encoding %q is declared, but byte %d is 0x%02X, which is not ASCII", label, i+sent-len(data), data[i])
		}
		return r, nil
	}
	var (
		stack []*xmlElem
		free  []*xmlElem // elements ended, to be used again (see reset)
		root  any
		done  bool
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			var xe *XMLError
			if errors.As(err, &xe) {
				return nil, xe
			}
			return nil, xmlErrorf("%s", strings.TrimPrefix(err.Error(), "XML syntax error on "))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if done {
				return nil, xmlErrorf("more than one root element (<%s> after the root)", t.Name.Local)
			}
			if len(stack) >= XMLMaxDepth {
				return nil, xmlErrorf("elements nested deeper than %d levels", XMLMaxDepth)
			}
			if len(t.Attr) > XMLMaxAttributes {
				return nil, xmlErrorf("element <%s> has more than %d attributes", t.Name.Local, XMLMaxAttributes)
			}
			var e *xmlElem
			if n := len(free); n > 0 {
				e, free = free[n-1], free[:n-1]
				e.reset(t.Name.Local)
			} else {
				e = &xmlElem{name: t.Name.Local}
			}
			for i, a := range t.Attr {
				for _, b := range t.Attr[:i] {
					if a.Name == b.Name {
						return nil, xmlErrorf("element <%s> has the attribute %s twice", t.Name.Local, a.Name.Local)
					}
				}
				if a.Name.Space == "xmlns" || a.Name.Space == "" && a.Name.Local == "xmlns" {
					continue
				}
				e.add("@"+a.Name.Local, a.Value)
			}
			stack = append(stack, e)
		case xml.EndElement:
			e := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			v := e.value()
			free = append(free, e)
			if len(stack) == 0 {
				root, done = v, true
			} else {
				stack[len(stack)-1].add(e.name, v)
			}
		case xml.CharData:
			if len(stack) == 0 {
				if len(bytes.TrimSpace(t)) > 0 {
					return nil, xmlErrorf("text outside the root element")
				}
				continue
			}
			stack[len(stack)-1].text.Write(t)
		case xml.Directive:
			if len(stack) == 0 && bytes.HasPrefix(bytes.TrimSpace(t), []byte("DOCTYPE")) {
				return nil, xmlErrorf("a DOCTYPE is not accepted")
			}
			return nil, xmlErrorf("directive <!%s> is not accepted", firstWord(t))
		}
	}
	if !done {
		return nil, xmlErrorf("no root element")
	}
	return root, nil
}

// IsUTF8Charset reports whether label names UTF-8 ("UTF-8" or "utf8", in
// any case), the same names in a Content-Type's charset and in an XML
// declaration's encoding.
func IsUTF8Charset(label string) bool {
	return strings.EqualFold(label, "utf-8") || strings.EqualFold(label, "utf8")
}

// IsASCIICharset reports whether label names US-ASCII ("US-ASCII" or
// "ascii", in any case): text in it is UTF-8 as it is, when its bytes are
// all below 0x80.
func IsASCIICharset(label string) bool {
	return strings.EqualFold(label, "us-ascii") || strings.EqualFold(label, "ascii")
}

// NonASCII returns the index of the first byte of b that is 0x80 or more
// (not ASCII), or -1 when there is none.
func NonASCII(b []byte) int {
	for i, c := range b {
		if c >= 0x80 {
			return i
		}
	}
	return -1
}

func firstWord(b []byte) string {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}

type xmlElem struct {
	name string
	obj  objectBuilder // children and attributes in order of first appearance
	text bytes.Buffer
	// arrays holds the values of the keys seen more than once, by their
	// position in obj: they go into obj when the element ends, since an
	// array stored back into obj at each sibling was boxed again each time
	arrays map[int][]any
}

// add puts a child or an attribute under key; a name seen before turns its
// value into an array. The key is found through objectBuilder, not by a scan
// of the keys: an element of many distinct children would otherwise take
// quadratic time (a body of 90,000 names once took 8 s of CPU).
func (e *xmlElem) add(key string, v any) {
	i := e.obj.find(key)
	if i < 0 {
		e.obj.add(key, v)
		return
	}
	if a, ok := e.arrays[i]; ok {
		e.arrays[i] = append(a, v)
		return
	}
	if e.arrays == nil {
		e.arrays = map[int][]any{}
	}
	e.arrays[i] = []any{e.obj.vals[i], v}
}

// value is the element's value once it ended. The element may then be
// reset and used again: the value shares nothing with it.
func (e *xmlElem) value() any {
	text := e.text.String()
	if len(e.obj.keys) == 0 {
		return text
	}
	for i, a := range e.arrays {
		e.obj.vals[i] = withSize(a, jsonSize(a, unbounded))
	}
	if t := strings.TrimSpace(text); t != "" {
		// no child or attribute key starts with '#'
		e.obj.add("#text", t)
	}
	o := e.obj.object()
	// counted once here, each child in one step (its own size known), so
	// that a template hole that holds the object does not walk it
	o.size = jsonSize(o, unbounded)
	return o
}

// reset makes e an element named name with nothing in it, its text
// buffer kept: an element is made for each one that starts, and
// 2.6 million siblings (a 10 MiB body of <b/>) allocated 312 MB of them.
func (e *xmlElem) reset(name string) {
	e.name, e.obj, e.arrays = name, objectBuilder{}, nil
	e.text.Reset()
}

// tooManyAttributes returns the local name of the first start tag of data
// with more than XMLMaxAttributes attributes, counted as the '=' signs
// outside quotes, and true; comments, CDATA sections and processing
// instructions are skipped. encoding/xml reads a whole start tag before
// the cap can be checked, allocating about 25 bytes for each byte of the
// tag, so a tag over the cap is refused before the decoder sees it. In a
// document encoding/xml accepts, the count is the number of attributes, so
// this refuses nothing the cap after Token would let through.
func tooManyAttributes(data []byte) (string, bool) {
	skip := func(i int, end string) int {
		k := bytes.Index(data[i:], []byte(end))
		if k < 0 {
			return len(data)
		}
		return i + k + len(end)
	}
	for i := 0; i < len(data); {
		k := bytes.IndexByte(data[i:], '<')
		if k < 0 {
			return "", false
		}
		i += k + 1
		rest := data[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("!--")):
			i = skip(i+3, "-->")
		case bytes.HasPrefix(rest, []byte("![CDATA[")):
			i = skip(i+8, "]]>")
		case bytes.HasPrefix(rest, []byte("?")):
			i = skip(i+1, "?>")
		case bytes.HasPrefix(rest, []byte("!")), bytes.HasPrefix(rest, []byte("/")):
			// a directive (refused after the decoder reads it) or an end tag
		default:
			nameEnd := bytes.IndexAny(rest, " \t\r\n/>")
			if nameEnd < 0 {
				nameEnd = len(rest)
			}
			name := rest[:nameEnd]
			if c := bytes.LastIndexByte(name, ':'); c >= 0 {
				name = name[c+1:]
			}
			attrs := 0
			var quote byte
		tag:
			for ; i < len(data); i++ {
				switch c := data[i]; {
				case quote != 0:
					if c == quote {
						quote = 0
					}
				case c == '"' || c == '\'':
					quote = c
				case c == '=':
					if attrs++; attrs > XMLMaxAttributes {
						return string(name), true
					}
				case c == '>':
					break tag
				}
			}
		}
	}
	return "", false
}
