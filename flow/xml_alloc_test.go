package flow

import (
	"runtime"
	"strings"
	"testing"
)

// TestFlattenXMLSiblingsAllocation: a 1 MiB document of 262,144 empty
// sibling elements, the most elements a body of that size holds, allocates
// less than 85 times its size: 69 MB, 48 MB of them encoding/xml's tokens.
// Each element had a builder of its own, and each repeated sibling boxed
// its array again: 107 MB, and a backend's 10 MiB answer of them 1 GB.
func TestFlattenXMLSiblingsAllocation(t *testing.T) {
	n := 1 << 18
	data := []byte("<a>" + strings.Repeat("<b/>", n) + "</a>")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := FlattenXML(data)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(v.(*Object).vals[0].([]any)); got != n {
		t.Fatalf("%d siblings read, want %d", got, n)
	}
	if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(85*len(data)); alloc > bound {
		t.Errorf("flattening %d bytes allocated %d MB, over %d MB", len(data), alloc>>20, bound>>20)
	}
}
