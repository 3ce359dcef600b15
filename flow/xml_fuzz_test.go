package flow

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzFlattenXML holds the flattener's promises on any input: it never
// panics; a refusal is one *XMLError line; an accepted document was within
// the depth and attribute caps and flattens to a value that writes out as
// valid JSON and reads back the same.
func FuzzFlattenXML(f *testing.F) {
	for _, seed := range []string{
		``,
		`<order><id>A-1</id></order>`,
		`<?xml version="1.0" encoding="UTF-8"?><o:order xmlns:o="urn:x"><o:id>A-1</o:id></o:order>`,
		`<order no="7"><item>a</item><item>b</item><note lang="en">hi</note></order>`,
		`<order>text<child/>more</order>`,
		`<a><b><c><d>x</d></c></b></a>`,
		`<a x="1" x="2"/>`,
		`<a/><b/>`,
		`<!DOCTYPE a><a/>`,
		`<?xml version="1.0"?><!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]><a>&e;</a>`,
		`<?xml version="1.0" encoding="ISO-8859-1"?><a>x</a>`,
		`<?xml version="1.0" encoding="US-ASCII"?><a>x</a>`,
		"<?xml version=\"1.0\" encoding=\"ascii\"?><a>\xc3\xa9</a>",
		`<a><![CDATA[<b>]]></a>`,
		`<a>&amp;&lt;&#x41;&#65;</a>`,
		`<a><!-- c --><?pi x?><b/></a>`,
		"<a>\x00</a>",
		"<a>\xff</a>",
		strings.Repeat("<e>", 64) + strings.Repeat("</e>", 64),
		strings.Repeat("<e>", 65) + strings.Repeat("</e>", 65),
		`<a><b>1</b><b>2</b><b><c>3</c></b></a>`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := FlattenXML(data)
		if err != nil {
			var xe *XMLError
			if !errors.As(err, &xe) {
				t.Fatalf("error %v is %T, want *XMLError", err, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is more than one line", err)
			}
			return
		}
		depth, maxDepth, maxAttrs := 0, 0, 0
		dec := xml.NewDecoder(bytes.NewReader(data))
		dec.Strict = true
		dec.CharsetReader = func(label string, r io.Reader) (io.Reader, error) {
			if IsASCIICharset(label) {
				return r, nil
			}
			return nil, errors.New("charset")
		}
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				depth++
				maxDepth = max(maxDepth, depth)
				maxAttrs = max(maxAttrs, len(tok.Attr))
			case xml.EndElement:
				depth--
			case xml.Directive:
				t.Fatalf("accepted a document with the directive <!%s>", tok)
			}
		}
		if maxDepth > XMLMaxDepth || maxAttrs > XMLMaxAttributes {
			t.Fatalf("accepted depth %d, %d attributes", maxDepth, maxAttrs)
		}
		out := AppendJSON(nil, v)
		if !json.Valid(out) {
			t.Fatalf("flattened to invalid JSON %q", out)
		}
		again, err := ParseJSON(out, 4*XMLMaxDepth)
		if err != nil {
			t.Fatalf("flattened JSON %q does not parse: %v", out, err)
		}
		if !Equal(v, again) {
			t.Fatalf("round trip changed the value: %q", out)
		}
	})
}
