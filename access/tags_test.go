package access_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
)

// TestTags: a YAML tag (`!foo x`, `!!int 5`, and the non-specific `! x`,
// which the YAML library drops without a trace) is refused on a value of
// access.yaml and on a key's name, as a flow's front matter refuses it;
// they were read as the value without it (`burst: ! 5` as 5, `flows: [!
// x]` as x). `!!str` on a string and `!!seq` on a list change nothing.
func TestTags(t *testing.T) {
	hash := "sha256: " + strings.Repeat("ab", 32)
	for _, tt := range []struct {
		fields []string
		want   string
	}{
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: 1", "burst: ! 5"}, "access.yaml:7: burst must be a whole number, not a value tagged !"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: 1", "burst: !foo 5"}, "access.yaml:7: burst must be a whole number, not a value tagged !foo"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: ! 1"}, "access.yaml:6: rate must be a number of requests per second, not a value tagged !"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: !foo 0x1ffffffffffffffff"}, "access.yaml:6: rate must be a number of requests per second, not a value tagged !foo"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: 1", "burst: !nxk_0123456789abcdef 5"}, "access.yaml:7: burst must be a whole number, not a value tagged with an API key (replace it: it is now in the repository)"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, "rate: !!float 1", "burst: !!int 5"}, ""},
		{[]string{"id: a", "tenant: acme", hash, "flows: [! x]"}, "access.yaml:5: each flow must be a name, not a value tagged !"},
		{[]string{"id: a", "tenant: acme", hash, "flows: [x, !foo y]"}, "access.yaml:5: each flow must be a name, not a value tagged !foo"},
		{[]string{"id: a", "tenant: acme", hash, "flows: ! [x]"}, `access.yaml:5: flows must be a list, e.g. [order-intake] or ["*"], not a value tagged !`},
		{[]string{"id: ! a", "tenant: acme", hash, `flows: ["*"]`}, "access.yaml:2: id must be a name, not a value tagged !"},
		{[]string{"id: a", "tenant: !foo acme", hash, `flows: ["*"]`}, "access.yaml:3: tenant must be a name, not a value tagged !foo"},
		{[]string{"id: a", "tenant: acme", "sha256: ! " + strings.Repeat("ab", 32), `flows: ["*"]`}, "access.yaml:4: sha256 must be the 64 hexadecimal characters of the key's SHA-256, not a value tagged !"},
		{[]string{"! id: a", "tenant: acme", hash, `flows: ["*"]`}, "access.yaml:2: a field of a key entry is a name, not a value tagged !"},
		{[]string{"id: a", "tenant: acme", hash, `!foo flows: ["*"]`}, "access.yaml:5: a field of a key entry is a name, not a value tagged !foo"},
	} {
		_, err := access.Parse("access.yaml", []byte(keysDoc(entry(tt.fields...))))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%v:\n got %q\nwant %q", tt.fields, got, tt.want)
		}
	}
	for src, want := range map[string]string{
		"! keys: []\n":           "access.yaml:1: a top-level key is a name, not a value tagged !",
		"keys: !foo []\n":        "access.yaml:1: keys must be a list of keys, not a value tagged !foo",
		"keys:\n  - ! {id: a}\n": "access.yaml:2: each entry of keys must be a mapping with id, tenant, sha256 and flows, not a value tagged !",
		"keys: !!seq []\n":       "",
		"!!str keys: [!!map {id: !!str a, tenant: !!str acme, sha256: " + strings.Repeat("ab", 32) + ", flows: !!seq [!!str x]}]\n": "",
	} {
		_, err := access.Parse("access.yaml", []byte(src))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%q:\n got %q\nwant %q", src, got, want)
		}
	}
}
