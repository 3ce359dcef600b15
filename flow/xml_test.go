package flow

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// manyNamesXML is a root of n distinct children <aI>I</aI>, each name in
// repeated (again after all of them, so its array gathers values that lie
// far apart), and text beside them. It is what flattening a body near the
// 1 MiB ceiling may meet.
func manyNamesXML(n int, repeated []int) []byte {
	var b strings.Builder
	b.WriteString(`<r id="7">head`)
	for i := range n {
		fmt.Fprintf(&b, "<a%d>%d</a%d>", i, i, i)
	}
	for _, i := range repeated {
		fmt.Fprintf(&b, "<a%d>again %d</a%d>", i, i, i)
	}
	b.WriteString("</r>")
	return []byte(b.String())
}

// TestFlattenXMLManyNames flattens an element of 90,000 distinct child
// names, the shape that once made flattening quadratic (each child compared
// with every key before it). How fast it runs is BenchmarkFlattenXML's
// business; this holds what the indexed lookup must keep: keys in order of
// first appearance, attributes first, a repeated name as one array in its
// first place, #text last, and every key found by Get.
func TestFlattenXMLManyNames(t *testing.T) {
	t.Parallel()
	const n = 90000
	repeated := []int{0, 11, 12, 13, 4567, n - 1}
	again := map[int]bool{}
	for _, i := range repeated {
		again[i] = true
	}
	data := manyNamesXML(n, repeated)
	got, err := FlattenXML(data)
	if err != nil {
		t.Fatalf("FlattenXML of %d bytes: %v", len(data), err)
	}

	keys := []string{"@id"}
	vals := []any{"7"}
	for i := range n {
		keys = append(keys, "a"+strconv.Itoa(i))
		if again[i] {
			vals = append(vals, []any{strconv.Itoa(i), "again " + strconv.Itoa(i)})
		} else {
			vals = append(vals, strconv.Itoa(i))
		}
	}
	keys = append(keys, "#text")
	vals = append(vals, "head")
	if diff := cmp.Diff(NewObject(keys, vals), got, docOpts); diff != "" {
		t.Fatalf("FlattenXML (-want +got):\n%s", diff)
	}

	o := got.(*Object)
	for i := range o.Len() {
		k, want := o.Key(i)
		if v, ok := o.Get(k); !ok || !cmp.Equal(v, want, docOpts) {
			t.Fatalf("Get(%q) = %v, %v; want %v, the value at position %d", k, v, ok, want, i)
		}
	}
	if v, ok := o.Get("a90000"); ok {
		t.Errorf("Get of a name not in the document = %v, true", v)
	}
}

// TestFlattenXMLRepeatedNames turns repeated siblings into arrays on both
// sides of objectIndexMin, where the lookup changes from a scan to the index.
func TestFlattenXMLRepeatedNames(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, objectIndexMin - 1, objectIndexMin, objectIndexMin + 1, 3 * objectIndexMin} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			// every name twice, the second round in reverse order, then
			// the first name a third time
			var b strings.Builder
			b.WriteString("<r>")
			for i := range n {
				fmt.Fprintf(&b, "<k%d>%d</k%d>", i, i, i)
			}
			for i := n - 1; i >= 0; i-- {
				fmt.Fprintf(&b, "<k%d>%d'</k%d>", i, i, i)
			}
			b.WriteString("<k0>0''</k0></r>")
			got, err := FlattenXML([]byte(b.String()))
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, n)
			vals := make([]any, n)
			for i := range n {
				keys[i] = "k" + strconv.Itoa(i)
				vals[i] = []any{strconv.Itoa(i), strconv.Itoa(i) + "'"}
			}
			vals[0] = append(vals[0].([]any), "0''")
			if diff := cmp.Diff(NewObject(keys, vals), got, docOpts); diff != "" {
				t.Errorf("FlattenXML (-want +got):\n%s", diff)
			}
		})
	}
}

// TestObjectBuilder holds the builder that the JSON parser, the XML
// flattener and YAML mappings share: find agrees with the order of add
// before and after the index is built, and the Object it returns finds
// every key, the last one added after the index included.
func TestObjectBuilder(t *testing.T) {
	t.Parallel()
	var b objectBuilder
	const n = 3 * objectIndexMin
	for i := range n {
		k := "k" + strconv.Itoa(i)
		if got := b.find(k); got != -1 {
			t.Fatalf("find(%q) before it was added = %d, want -1", k, got)
		}
		b.add(k, i)
		for j := 0; j <= i; j++ {
			if got := b.find("k" + strconv.Itoa(j)); got != j {
				t.Fatalf("after %d keys: find(k%d) = %d, want %d", i+1, j, got, j)
			}
		}
	}
	if b.index == nil {
		t.Errorf("no index after %d keys (objectIndexMin is %d)", n, objectIndexMin)
	}
	o := b.object()
	for i := range n {
		if v, ok := o.Get("k" + strconv.Itoa(i)); !ok || v != i {
			t.Errorf("Get(k%d) = %v, %v; want %d", i, v, ok, i)
		}
	}
	if _, ok := o.Get("k" + strconv.Itoa(n)); ok {
		t.Errorf("Get(k%d) found a key never added", n)
	}
}

// TestFlattenXMLHostileShapes gives the flattener the plan's shapes at the
// plan's figures (RELIABILITY C.15, 28 and 29), without the body ceiling in
// front of it: 1,000,000 nested elements are refused at the depth cap, the
// rest of the document unread, and an element of 200,000 attributes at the
// attribute cap, allocating at most twice the document (RELIABILITY G.28).
// The door's tests (host TestBadBodies) send smaller ones, which the 1 MiB
// ceiling lets through.
func TestFlattenXMLHostileShapes(t *testing.T) {
	const levels, attributes = 1_000_000, 200_000
	var attrs strings.Builder
	attrs.WriteString("<order")
	for i := range attributes {
		fmt.Fprintf(&attrs, ` a%d="v"`, i)
	}
	attrs.WriteString("><id>1</id></order>")
	for _, tc := range []struct {
		name, body, want string
		maxAlloc         uint64 // bytes allocated at most; 0: not measured
	}{
		{"1,000,000 levels", strings.Repeat("<e>", levels) + "x" + strings.Repeat("</e>", levels),
			"invalid XML: elements nested deeper than 64 levels", 1 << 20},
		{"200,000 attributes", attrs.String(), "invalid XML: element <order> has more than 256 attributes", 2 * uint64(attrs.Len())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.body)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := FlattenXML(data)
			runtime.ReadMemStats(&after)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("FlattenXML of %d bytes: %v, want %q", len(data), err, tc.want)
			}
			grown := after.TotalAlloc - before.TotalAlloc
			if tc.maxAlloc > 0 && grown > tc.maxAlloc {
				t.Errorf("FlattenXML of %d bytes allocated %d bytes, want at most %d", len(data), grown, tc.maxAlloc)
			}
			t.Logf("%d bytes: refused, %d bytes allocated", len(data), grown)
		})
	}
}

// TestFlattenXMLEncodings holds which encoding declarations are taken: ASCII
// is UTF-8's first 128 characters, so a document declared US-ASCII (or
// ascii) whose bytes are all ASCII is read as it is; one holding a byte of
// 0x80 or more contradicts its declaration and is refused, naming the
// byte. Another encoding is refused. US-ASCII was refused with "send UTF-8",
// though its bytes already were.
func TestFlattenXMLEncodings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want, wantErr string }{
		{"US-ASCII", `<?xml version="1.0" encoding="US-ASCII"?><o><id>A-1</id></o>`, `{"id":"A-1"}`, ""},
		{"us-ascii", `<?xml version="1.0" encoding="us-ascii"?><o id="7"/>`, `{"@id":"7"}`, ""},
		{"ascii", `<?xml version='1.0' encoding='ascii'?><o><id>&#233;</id></o>`, `{"id":"é"}`, ""},
		{"ASCII", `<?xml version="1.0" encoding="ASCII"?><o>x</o>`, `"x"`, ""},
		{"UTF-8", `<?xml version="1.0" encoding="UTF-8"?><o>é</o>`, `"é"`, ""},
		// utf8 names UTF-8 as a Content-Type's charset does (IsUTF8Charset)
		{"utf8", `<?xml version="1.0" encoding="utf8"?><o>é</o>`, `"é"`, ""},
		{"UTF8", `<?xml version="1.0" encoding="UTF8"?><o>é</o>`, `"é"`, ""},
		{"utf8 holding Latin-1", "<?xml version=\"1.0\" encoding=\"utf8\"?><o>\xe9</o>", "",
			`invalid XML: line 1: invalid UTF-8`},
		{"US-ASCII holding UTF-8", `<?xml version="1.0" encoding="US-ASCII"?><o>é</o>`, "",
			`invalid XML: encoding "US-ASCII" is declared, but byte 44 is 0xC3, which is not ASCII`},
		{"ascii holding Latin-1", "<?xml version=\"1.0\" encoding=\"ascii\"?><o a=\"\xe9\"/>", "",
			`invalid XML: encoding "ascii" is declared, but byte 44 is 0xE9, which is not ASCII`},
		{"ISO-8859-1", `<?xml version="1.0" encoding="ISO-8859-1"?><o>x</o>`, "",
			`invalid XML: encoding "ISO-8859-1" is not supported: send UTF-8`},
		{"US-ASCII7", `<?xml version="1.0" encoding="US-ASCII7"?><o>x</o>`, "",
			`invalid XML: encoding "US-ASCII7" is not supported: send UTF-8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := FlattenXML([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("FlattenXML(%q) = %v, want the error %q", tc.doc, err, tc.wantErr)
				}
				if _, ok := err.(*XMLError); !ok {
					t.Errorf("error is %T, want *XMLError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FlattenXML(%q): %v", tc.doc, err)
			}
			if got := string(AppendJSON(nil, v)); got != tc.want {
				t.Errorf("FlattenXML(%q) = %s, want %s", tc.doc, got, tc.want)
			}
		})
	}
}
