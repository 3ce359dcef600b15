package access_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nexushq/nexus/access"
)

const examplePath = "../flows-example/access.yaml"

// The keys of the example config repo, as its README lists them.
const (
	acmeExampleKey   = "nxk_example_acme_5f2c9d0e7b1a4c3d8e6f"
	acmeOrdersKey    = "nxk_49b4feb01fcae616bc614fd8a152cb14"
	globexExampleKey = "nxk_26d3156aeb305a711463f79ad743ecbb"
)

// Hashes used by the documents below.
const (
	hashA = "3fbf0f02b78be2797ff6c7eb9fdfa58ae476314de4be26be6dcb33b0bc38c040"
	hashB = "722c5dd694588271ec3e19a5c509e4277da15d45df959d8a36cdc600090fe3eb"
	// hashEmpty is the SHA-256 of the empty string.
	hashEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func mustHash(t testing.TB, s string) [32]byte {
	t.Helper()
	var h [32]byte
	if n, err := hex.Decode(h[:], []byte(s)); err != nil || n != 32 {
		t.Fatalf("bad test hash %q", s)
	}
	return h
}

// entry writes one item of keys: from its field lines.
func entry(fields ...string) string {
	var b strings.Builder
	for i, f := range fields {
		if i == 0 {
			b.WriteString("  - " + f + "\n")
		} else {
			b.WriteString("    " + f + "\n")
		}
	}
	return b.String()
}

// keysDoc is an access.yaml holding the entries.
// keyFields compares keys by their exported fields: the set Parse builds
// of a long flows list (Allows's) is not part of what the file says.
var keyFields = cmpopts.IgnoreUnexported(access.Key{})

func keysDoc(entries ...string) string { return "keys:\n" + strings.Join(entries, "") }

func parseExample(t testing.TB) *access.Set {
	t.Helper()
	src, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	set, err := access.Parse(examplePath, src)
	if err != nil {
		t.Fatalf("Parse(%s): %v", examplePath, err)
	}
	return set
}

func TestParseExample(t *testing.T) {
	set := parseExample(t)
	want := []access.Key{
		{ID: "acme-example", Tenant: "acme", Hash: access.HashKey(acmeExampleKey), AllFlows: true, Rate: 50, Burst: 100, Line: 10},
		{ID: "acme-orders", Tenant: "acme", Hash: access.HashKey(acmeOrdersKey), Flows: []string{"forward-order", "order-intake"}, Rate: 50, Burst: 100, Line: 17},
		{ID: "globex-example", Tenant: "globex", Hash: access.HashKey(globexExampleKey), AllFlows: true, Rate: 20, Burst: 40, Line: 24},
	}
	if diff := cmp.Diff(want, set.Keys(), keyFields); diff != "" {
		t.Errorf("Keys() (-want +got):\n%s", diff)
	}
	if set.Len() != 3 {
		t.Errorf("Len() = %d, want 3", set.Len())
	}
}

func TestLookup(t *testing.T) {
	set := parseExample(t)
	tests := []struct {
		name      string
		presented string
		wantID    string // "" for no match
	}{
		{"AcmeExample", acmeExampleKey, "acme-example"},
		{"AcmeOrders", acmeOrdersKey, "acme-orders"},
		{"GlobexExample", globexExampleKey, "globex-example"},
		{"Unknown", "nxk_0000000000000000000000000000000000000000000000000000000000000000", ""},
		{"Empty", "", ""},
		{"TrailingSpace", acmeExampleKey + " ", ""},
		{"UpperCase", strings.ToUpper(acmeExampleKey), ""},
		{"Prefix", acmeExampleKey[:len(acmeExampleKey)-1], ""},
		{"TheHashItself", hashA, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok := set.Lookup(tt.presented)
			if tt.wantID == "" {
				if ok || k != nil {
					t.Fatalf("Lookup(%q) = %+v, %v; want no match", tt.presented, k, ok)
				}
				return
			}
			if !ok || k == nil {
				t.Fatalf("Lookup(%q) found nothing, want %s", tt.presented, tt.wantID)
			}
			if k.ID != tt.wantID {
				t.Errorf("Lookup(%q).ID = %q, want %q", tt.presented, k.ID, tt.wantID)
			}
		})
	}

	k, _ := set.Lookup(acmeExampleKey)
	if k.Tenant != "acme" || !k.AllFlows || k.Flows != nil {
		t.Errorf("acme-example = %+v, want tenant acme with every flow", k)
	}
}

func TestNilSet(t *testing.T) {
	var set *access.Set
	if k, ok := set.Lookup(acmeExampleKey); ok || k != nil {
		t.Errorf("nil Set Lookup = %+v, %v", k, ok)
	}
	if set.Len() != 0 || set.Keys() != nil || set.Source() != nil || set.Holds(access.HashKey(acmeExampleKey)) {
		t.Error("nil Set is not empty")
	}
}

// TestHolds: a set holds the hashes of its keys and no other (not a key
// itself, nor the zero hash).
func TestHolds(t *testing.T) {
	set := parseExample(t)
	for _, tt := range []struct {
		name string
		hash [32]byte
		want bool
	}{
		{"AcmeExample", access.HashKey(acmeExampleKey), true},
		{"GlobexExample", access.HashKey(globexExampleKey), true},
		{"Unknown", access.HashKey("nxk_unknown"), false},
		{"Zero", [32]byte{}, false},
	} {
		if got := set.Holds(tt.hash); got != tt.want {
			t.Errorf("%s: Holds = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAllows(t *testing.T) {
	all := &access.Key{ID: "all", Tenant: "acme", AllFlows: true}
	some := &access.Key{ID: "some", Tenant: "acme", Flows: []string{"forward-order", "order-intake"}}
	tests := []struct {
		key  *access.Key
		flow string
		want bool
	}{
		{all, "order-intake", true},
		{all, "anything", true},
		{some, "order-intake", true},
		{some, "forward-order", true},
		{some, "order-intake2", false},
		{some, "order", false},
		{some, "", false},
		{some, "*", false},
		{&access.Key{ID: "none"}, "order-intake", false},
	}
	for _, tt := range tests {
		if got := tt.key.Allows(tt.flow); got != tt.want {
			t.Errorf("key %s Allows(%q) = %v, want %v", tt.key.ID, tt.flow, got, tt.want)
		}
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []access.Key
	}{
		{
			name: "NoKeys",
			doc:  "keys: []\n",
			want: []access.Key{},
		},
		{
			name: "BlockListsAndDefaultBurst",
			doc: "# keys\nkeys:\n- id: a\n  tenant: acme\n  sha256: " + hashA + "\n  flows:\n    - order-intake\n    - forward-order\n  rate: 2.5\n" +
				"- id: b\n  tenant: acme\n  sha256: " + hashB + "\n  flows: [x]\n  rate: 0.2\n",
			want: []access.Key{
				{ID: "a", Tenant: "acme", Hash: mustHash(t, hashA), Flows: []string{"order-intake", "forward-order"}, Rate: 2.5, Burst: 3, Line: 3},
				{ID: "b", Tenant: "acme", Hash: mustHash(t, hashB), Flows: []string{"x"}, Rate: 0.2, Burst: 1, Line: 10},
			},
		},
		{
			name: "UnlimitedUpperCaseHashQuotedNames",
			doc:  keysDoc(entry(`id: "a"`, `tenant: 'acme'`, "sha256: "+strings.ToUpper(hashA), `flows: ["order-intake"]`)),
			want: []access.Key{
				{ID: "a", Tenant: "acme", Hash: mustHash(t, hashA), Flows: []string{"order-intake"}, Line: 2},
			},
		},
		{
			name: "NumericNamesAndNumericLookingHash",
			doc:  keysDoc(entry("id: 42", "tenant: 2024", "sha256: "+strings.Repeat("1", 64), "flows: [7, 1e5]", "rate: 1", "burst: 1")),
			want: []access.Key{
				{ID: "42", Tenant: "2024", Hash: mustHash(t, strings.Repeat("1", 64)), Flows: []string{"7", "1e5"}, Rate: 1, Burst: 1, Line: 2},
			},
		},
		{
			name: "ByteOrderMarkAndCRLF",
			doc:  "\xef\xbb\xbfkeys:\r\n  - id: a\r\n    tenant: acme\r\n    sha256: " + hashA + "\r\n    flows: [\"*\"]\r\n",
			want: []access.Key{
				{ID: "a", Tenant: "acme", Hash: mustHash(t, hashA), AllFlows: true, Line: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := access.Parse("access.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, set.Keys(), keyFields); diff != "" {
				t.Errorf("Keys() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const empty = "the file is empty: write keys: with a list of keys (keys: [] lets nobody call)"
	star := `flows: ["*"]`
	tests := []struct {
		name string
		doc  string
		want []string // error lines after "access.yaml:"
	}{
		{"EmptyFile", "", []string{"1: " + empty}},
		{"OnlyComments", "# nothing yet\n", []string{"1: " + empty}},
		{"OnlyDocumentStart", "---\n", []string{"1: " + empty}},
		{"NotAMapping", "- id: a\n", []string{"1: the file must be a mapping with a keys: list, not a list"}},
		{"NoKeys", "version: 1\n", []string{
			`1: unknown top-level key "version": the only one is keys`,
			"1: no keys: list: write keys: with a list of keys (keys: [] lets nobody call)",
		}},
		{"KeysMisspelled", "# access\nkyes: []\n", []string{
			"1: no keys: list: write keys: with a list of keys (keys: [] lets nobody call)",
			`2: unknown top-level key "kyes" (did you mean keys?)`,
		}},
		{"KeysTwice", "keys: []\nkeys: []\n", []string{`2: "keys" is set twice (first at line 1)`}},
		// a complex key (? [a]) names nothing: it was an unknown top-level
		// key "", and a second one "" set twice
		{"ComplexTopLevelKeys", "? [a]\n: 1\n? {b: c}\n: 2\nkeys: []\n", []string{
			"1: a top-level key is a name, not a list",
			"3: a top-level key is a name, not a mapping",
		}},
		{"ComplexFieldName", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "? [x]", ": y", "? [z]", ": w")), []string{
			"6: a field of a key entry is a name, not a list",
			"8: a field of a key entry is a name, not a list",
		}},
		{"KeysEmptyValue", "keys:\n", []string{"1: keys must be a list of keys, not an empty value (keys: [] lets nobody call)"}},
		{"KeysMapping", "keys:\n  id: a\n", []string{"1: keys must be a list of keys, not a mapping (keys: [] lets nobody call)"}},
		{"SecondDocument", "keys: []\n---\nkeys: []\n", []string{"2: a second YAML document starts here: access.yaml holds one document"}},
		{"YAMLSyntax", "keys: [\n", []string{"1: not valid YAML: did not find expected node content"}},
		{"Tab", "keys: []\n\tx: 1\n", []string{"2: not valid YAML: found character that cannot start any token"}},
		// the YAML reader's errors carry no line: the first character it
		// refuses is found, rather than every one said to be on line 1
		{"ControlCharacter", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), "  - id: b\x01\n"), []string{
			"6: not valid YAML: control characters are not allowed",
		}},
		{"ControlCharacterQuoted", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), "  - id: \"b\x7f\"\n"), []string{
			"6: not valid YAML: control characters are not allowed",
		}},
		{"InvalidUTF8", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), "  - id: b\xff\n"), []string{
			"6: not valid YAML: invalid leading UTF-8 octet",
		}},
		{"UnquotedStar", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: [*]")), []string{
			`5: not valid YAML: did not find expected alphabetic or numeric character (a bare * is a YAML alias: write flows: ["*"])`,
		}},
		{"EntryNotAMapping", keysDoc("  - acme-orders\n"), []string{
			`2: each entry of keys must be a mapping with id, tenant, sha256 and flows, not the string "acme-orders"`,
		}},
		{"MissingFields", keysDoc(entry("rate: 5")), []string{
			"2: the key entry has no id: add id: NAME (the name of the key in logs, e.g. acme-orders)",
			"2: the key entry has no tenant: add tenant: NAME",
			"2: the key entry has no sha256: add the hex SHA-256 of the key (nexus key generate prints the entry)",
			`2: the key entry has no flows: add flows: [NAME, …], or flows: ["*"] for every flow of the tenant`,
		}},
		{"UnknownFieldNearMiss", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flow: [x]")), []string{
			`2: key "a" has no flows: add flows: [NAME, …], or flows: ["*"] for every flow of the tenant`,
			`5: unknown field "flow" in a key entry (did you mean flows?)`,
		}},
		// a merge key is not read (its fields would come from elsewhere in
		// the file); it was an unknown field "<<" (did you mean id?)
		{"MergeKey", "keys:\n  - &base\n    id: a\n    tenant: acme\n    sha256: " + hashA + "\n    flows: [\"*\"]\n  - <<: *base\n    id: b\n    tenant: acme\n    sha256: " + hashB + "\n    flows: [\"*\"]\n", []string{
			`7: "<<" (a YAML merge key) is not read in a key entry: write each field of the entry`,
		}},
		{"UnknownField", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "comment: hi")), []string{
			`6: unknown field "comment" in a key entry: the fields are id, tenant, sha256, flows, rate and burst`,
		}},
		{"FieldTwice", keysDoc(entry("id: a", "tenant: acme", "tenant: globex", "sha256: "+hashA, star)), []string{
			`4: field "tenant" is set twice (first at line 3)`,
		}},
		{"IDInvalid", keysDoc(entry("id: Acme", "tenant: acme", "sha256: "+hashA, star)), []string{
			`2: invalid id "Acme": character 'A' at position 1 is not allowed`,
		}},
		{"IDTooLong", keysDoc(entry("id: "+strings.Repeat("a", 65), "tenant: acme", "sha256: "+hashA, star)), []string{
			`2: invalid id "` + strings.Repeat("a", 64) + `"…: the name is 65 characters long, more than 64`,
		}},
		{"IDList", keysDoc(entry("id: [a]", "tenant: acme", "sha256: "+hashA, star)), []string{
			"2: id must be a name, not a list",
		}},
		{"IDIsAKey", keysDoc(entry("id: "+acmeExampleKey, "tenant: acme", "sha256: "+hashA, star)), []string{
			"2: id holds nxk_ like an API key: ids appear in logs, so give the key a name such as acme-orders",
		}},
		{"IDDuplicate", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), entry("id: a", "tenant: acme", "sha256: "+hashB, star)), []string{
			`6: duplicate id "a" (first used at line 2)`,
		}},
		{"TenantInvalid", keysDoc(entry("id: a", "tenant: Acme Corp", "sha256: "+hashA, star)), []string{
			`3: invalid name "Acme Corp" for tenant (flow "*"): character 'A' at position 1 is not allowed`,
		}},
		{"TenantEmptyValue", keysDoc(entry("id: a", "tenant:", "sha256: "+hashA, star)), []string{
			"3: tenant must be a name, not an empty value",
		}},
		{"HashShort", keysDoc(entry("id: a", "tenant: acme", "sha256: 3b6a", star)), []string{
			"4: sha256 must be the 64 hexadecimal characters of the key's SHA-256, not 4 characters",
		}},
		{"HashNotHex", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA[:10]+"g"+hashA[11:], star)), []string{
			"4: sha256 must be the 64 hexadecimal characters of the key's SHA-256: the character at position 11 is not 0-9, a-f or A-F",
		}},
		{"HashIsAKey", keysDoc(entry("id: a", "tenant: acme", "sha256: "+acmeExampleKey, star)), []string{
			"4: sha256 holds an API key, not its hash: commit the hash instead (nexus key generate prints the entry) and replace the key, which is now in the repository",
		}},
		{"HashOfEmptyString", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashEmpty, star)), []string{
			"4: sha256 is the SHA-256 of the empty string, which is never a key",
		}},
		{"HashDuplicate", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), entry("id: b", "tenant: globex", "sha256: "+strings.ToUpper(hashA), star)), []string{
			`8: sha256 is already the hash of key "a" (line 2): two entries cannot share one key`,
		}},
		{"FlowsScalar", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, `flows: "*"`)), []string{
			`5: flows must be a list, e.g. [order-intake] or ["*"], not the string "*"`,
		}},
		{"FlowsEmpty", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: []")), []string{
			`5: flows is empty: list the flows the key may call, or ["*"] for every flow of the tenant`,
		}},
		{"FlowsStarAndNames", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, `flows: ["*", order-intake]`)), []string{
			`5: flows mixes "*" (every flow) with flow names: write either ["*"] or the names`,
		}},
		{"FlowsBadNames", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows:", "  - Order", "  - {x: 1}", "  - ok", "  - ok")), []string{
			`6: invalid name "Order" for flow (tenant "acme"): character 'O' at position 1 is not allowed`,
			"7: each flow must be a name, not a mapping",
			`9: flows lists "ok" twice`,
		}},
		{"RateString", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, `rate: "fast"`)), []string{
			`6: rate must be a number of requests per second, not the string "fast"`,
		}},
		{"RateZero", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate: 0")), []string{
			"6: rate must be more than 0, not 0: leave rate out for no limit",
		}},
		{"RateInfinite", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate: .inf")), []string{
			"6: rate must be a number of requests per second, not the number .inf",
		}},
		{"RateEmptyValue", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate:")), []string{
			"6: rate must be a number of requests per second, not an empty value",
		}},
		{"BurstFraction", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate: 1", "burst: 1.5")), []string{
			"7: burst must be a whole number, not the number 1.5",
		}},
		{"BurstZero", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate: 1", "burst: 0")), []string{
			"7: burst must be at least 1, not 0",
		}},
		{"BurstWithoutRate", keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "burst: 10")), []string{
			"6: burst without rate does nothing: add rate (requests per second), or remove burst",
		}},
		{"EveryErrorInLineOrder", keysDoc(
			entry("id: b", "tenant: acme", "sha256: "+hashB, "flows: []", `rate: "x"`),
			entry("id: a", "tenant: ACME", "sha256: "+hashB, star),
		), []string{
			`5: flows is empty: list the flows the key may call, or ["*"] for every flow of the tenant`,
			`6: rate must be a number of requests per second, not the string "x"`,
			`8: invalid name "ACME" for tenant (flow "*"): character 'A' at position 1 is not allowed`,
			`9: sha256 is already the hash of key "b" (line 2): two entries cannot share one key`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := access.Parse("access.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse succeeded with %d keys, want errors", set.Len())
			}
			if set != nil {
				t.Error("Parse returned a Set with its errors")
			}
			var list access.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want access.ErrorList", err)
			}
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = "access.yaml:" + w
			}
			if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			for i, e := range list {
				if got := e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg; got != want[i] {
					t.Errorf("list[%d] = %q, want %q", i, got, want[i])
				}
			}
		})
	}
	if len(tests) < 15 {
		t.Fatalf("%d invalid documents, want at least 15", len(tests))
	}
}

// TestErrorsNeverEchoAKey checks that a key pasted into access.yaml does not
// reach an error message, which ends up in logs and /status.
func TestErrorsNeverEchoAKey(t *testing.T) {
	key, err := access.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		keysDoc(entry("id: "+key, "tenant: acme", "sha256: "+hashA, `flows: ["*"]`)),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+key, `flows: ["*"]`)),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+strings.TrimPrefix(key, access.KeyPrefix)+"zz", `flows: ["*"]`)),
	} {
		_, err := access.Parse("access.yaml", []byte(doc))
		if err == nil {
			t.Fatalf("Parse succeeded on\n%s", doc)
		}
		if strings.Contains(err.Error(), strings.TrimPrefix(key, access.KeyPrefix)[:16]) {
			t.Errorf("error echoes the key: %v", err)
		}
	}
}

func TestSource(t *testing.T) {
	doc := "\xef\xbb\xbfkeys:\r\n  - id: a\r\n    tenant: acme\r\n    sha256: " + hashA + "\r\n    flows: [\"*\"]\r\n"
	input := []byte(doc)
	set, err := access.Parse("access.yaml", input)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(strings.TrimPrefix(doc, "\xef\xbb\xbf"), "\r\n", "\n")
	if diff := cmp.Diff(want, string(set.Source())); diff != "" {
		t.Errorf("Source() (-want +got):\n%s", diff)
	}
	if string(input) != doc {
		t.Error("Parse modified its input")
	}

	// Source is a copy, and parses back to the same keys.
	src := set.Source()
	src[0] = 'X'
	if bytes.HasPrefix(set.Source(), []byte("X")) {
		t.Error("Source() shares its bytes with the Set")
	}
	again, err := access.Parse("access.yaml", set.Source())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set.Keys(), again.Keys(), keyFields); diff != "" {
		t.Errorf("Parse(Source()) (-first +again):\n%s", diff)
	}

	// The Set does not share bytes with its input either.
	input[len(input)-3] = 'X'
	if !bytes.Equal(set.Source(), again.Source()) {
		t.Error("the Set shares its source with the caller's slice")
	}
}

func TestKeysIsACopy(t *testing.T) {
	set := parseExample(t)
	keys := set.Keys()
	keys[0].ID = "changed"
	keys[1].Flows[0] = "changed"
	if diff := cmp.Diff(parseExample(t).Keys(), set.Keys(), keyFields); diff != "" {
		t.Errorf("changing Keys() changed the Set (-want +got):\n%s", diff)
	}
}

var keyShape = regexp.MustCompile(`^nxk_[0-9a-f]{64}$`)

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		key, err := access.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !keyShape.MatchString(key) {
			t.Fatalf("Generate() = %q, want nxk_ and 64 lowercase hex characters", key)
		}
		if seen[key] {
			t.Fatalf("Generate() returned %q twice", key)
		}
		seen[key] = true
	}
}

func TestEntryFormat(t *testing.T) {
	got := access.Entry("acme-orders", "acme", []string{"forward-order", "order-intake"}, 50, 100, mustHash(t, hashB))
	want := "  - id: acme-orders\n" +
		"    tenant: acme\n" +
		"    sha256: " + hashB + "\n" +
		"    flows: [forward-order, order-intake]\n" +
		"    rate: 50\n" +
		"    burst: 100\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Entry (-want +got):\n%s", diff)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	tests := []struct {
		name         string
		id, tenant   string
		flows        []string
		rate         float64
		burst        int
		want         access.Key // Hash and Line are filled in
		wantLastLine string
	}{
		{name: "AllFlows", id: "acme-all", tenant: "acme", flows: []string{"*"}, rate: 50, burst: 100,
			want:         access.Key{ID: "acme-all", Tenant: "acme", AllFlows: true, Rate: 50, Burst: 100},
			wantLastLine: "    burst: 100"},
		{name: "SomeFlows", id: "acme-orders", tenant: "acme", flows: []string{"forward-order", "order-intake"}, rate: 2.5, burst: 7,
			want:         access.Key{ID: "acme-orders", Tenant: "acme", Flows: []string{"forward-order", "order-intake"}, Rate: 2.5, Burst: 7},
			wantLastLine: "    burst: 7"},
		{name: "DefaultBurst", id: "slow", tenant: "globex", flows: []string{"x"}, rate: 0.25,
			want:         access.Key{ID: "slow", Tenant: "globex", Flows: []string{"x"}, Rate: 0.25, Burst: 1},
			wantLastLine: "    burst: 1"},
		{name: "DefaultBurstRoundsUp", id: "k", tenant: "t", flows: []string{"f"}, rate: 10.1,
			want:         access.Key{ID: "k", Tenant: "t", Flows: []string{"f"}, Rate: 10.1, Burst: 11},
			wantLastLine: "    burst: 11"},
		{name: "Unlimited", id: "free", tenant: "acme", flows: []string{"*"}, burst: 5,
			want:         access.Key{ID: "free", Tenant: "acme", AllFlows: true},
			wantLastLine: `    flows: ["*"]`},
		{name: "NamesYAMLWouldMisread", id: "null", tenant: "true", flows: []string{"null", "1e5", "0x1f"}, rate: 1e-3, burst: 1,
			want:         access.Key{ID: "null", Tenant: "true", Flows: []string{"null", "1e5", "0x1f"}, Rate: 1e-3, Burst: 1},
			wantLastLine: "    burst: 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := access.Generate()
			if err != nil {
				t.Fatal(err)
			}
			e := access.Entry(tt.id, tt.tenant, tt.flows, tt.rate, tt.burst, access.HashKey(key))
			if !strings.HasSuffix(e, tt.wantLastLine+"\n") {
				t.Errorf("Entry does not end with %q:\n%s", tt.wantLastLine, e)
			}
			if strings.Contains(e, key) {
				t.Fatal("Entry holds the key")
			}
			set, err := access.Parse("access.yaml", []byte("keys:\n"+e))
			if err != nil {
				t.Fatalf("Parse(Entry):\n%s\n%v", e, err)
			}
			want := tt.want
			want.Hash = access.HashKey(key)
			want.Line = 2
			if diff := cmp.Diff([]access.Key{want}, set.Keys(), keyFields); diff != "" {
				t.Errorf("Parse(Entry) (-want +got):\n%s", diff)
			}
			if got, ok := set.Lookup(key); !ok || got.ID != tt.id {
				t.Errorf("Lookup of the generated key = %+v, %v", got, ok)
			}
		})
	}
}

// TestEntryCannotAddFields checks that an argument holding a newline is
// quoted rather than adding a line to the entry.
func TestEntryCannotAddFields(t *testing.T) {
	e := access.Entry("a", "acme\n    flows: [\"*\"]", []string{"x"}, 0, 0, mustHash(t, hashA))
	if n := strings.Count(e, "\n"); n != 4 {
		t.Errorf("Entry has %d lines, want 4:\n%s", n, e)
	}
	_, err := access.Parse("access.yaml", []byte("keys:\n"+e))
	want := `access.yaml:3: invalid name "acme\n    flows: [\"*\"]" for tenant (flow "*"): character '\n' at position 5 is not allowed`
	if err == nil || err.Error() != want {
		t.Errorf("Parse(Entry) error = %v, want %s", err, want)
	}
}

// TestNoPlaintextInSet walks every field of a Set, and its Source, looking
// for the keys the file was made from. (The example file is not used: it
// names its development key in a comment on purpose.)
func TestNoPlaintextInSet(t *testing.T) {
	keys := []string{acmeExampleKey, acmeOrdersKey, globexExampleKey}
	var doc strings.Builder
	doc.WriteString("keys:\n")
	for i, k := range keys {
		doc.WriteString(access.Entry("k"+strconv.Itoa(i), "acme", []string{"*"}, 1, 1, access.HashKey(k)))
	}
	set, err := access.Parse("access.yaml", []byte(doc.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := set.Lookup(k); !ok {
			t.Fatalf("key %s does not look up", k)
		}
	}

	for _, k := range keys {
		if bytes.Contains(set.Source(), []byte(k)) {
			t.Errorf("Source() holds key %s", k)
		}
	}
	var texts []string
	collectText(reflect.ValueOf(set), &texts)
	if !slices.Contains(texts, "k2") {
		t.Fatalf("the walk did not reach the keys' ids (found %q); it is broken", texts)
	}
	for _, text := range texts {
		for _, k := range keys {
			if strings.Contains(text, k) {
				t.Errorf("the Set holds key %s", k)
			}
		}
	}
}

// collectText appends every string and byte slice reachable from v.
func collectText(v reflect.Value, out *[]string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectText(v.Elem(), out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			collectText(v.Field(i), out)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, v.Len())
			for i := range b {
				b[i] = byte(v.Index(i).Uint())
			}
			*out = append(*out, string(b))
			return
		}
		for i := range v.Len() {
			collectText(v.Index(i), out)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			collectText(it.Key(), out)
			collectText(it.Value(), out)
		}
	case reflect.String:
		*out = append(*out, v.String())
	}
}

// TestLookupIsConstantTime reads Lookup's source: it must confirm a match
// with subtle.ConstantTimeCompare, and every == or != in it must have a
// literal, nil or the ConstantTimeCompare result on one side, so nothing
// secret (the presented key or a hash) is compared with ==. bytes.Equal and
// the other equality helpers are refused in the whole file.
func TestLookupIsConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "access.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lookup *ast.FuncDecl
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Lookup" && fn.Recv != nil {
			lookup = fn
		}
	}
	if lookup == nil {
		t.Fatal("access.go has no Lookup method")
	}
	isCTC := func(e ast.Expr) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && pkg.Name == "subtle" && sel.Sel.Name == "ConstantTimeCompare"
	}
	harmless := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.BasicLit:
			return true
		case *ast.Ident:
			return e.Name == "nil"
		}
		return isCTC(e)
	}
	calls := 0
	ast.Inspect(lookup.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if isCTC(n) {
				calls++
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && !harmless(n.X) && !harmless(n.Y) {
				t.Errorf("%s: Lookup compares with %s; compare hashes with subtle.ConstantTimeCompare", fset.Position(n.Pos()), n.Op)
			}
		}
		return true
	})
	if calls == 0 {
		t.Error("Lookup does not call subtle.ConstantTimeCompare")
	}
	equalities := map[string]bool{
		"bytes.Equal": true, "bytes.Compare": true, "strings.Compare": true, "strings.EqualFold": true,
		"slices.Equal": true, "slices.Compare": true, "reflect.DeepEqual": true,
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok && equalities[pkg.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: access.go calls %s.%s; compare hashes with subtle.ConstantTimeCompare only", fset.Position(sel.Pos()), pkg.Name, sel.Sel.Name)
			}
		}
		return true
	})
}

var errorLine = regexp.MustCompile(`^fuzz\.yaml:[1-9][0-9]*: [^\n]+$`)

// FuzzParse holds Parse's promises on any input: it never panics; it either
// returns a Set, or every error as one PATH:LINE: message line in line
// order; a Set's Source parses to the same keys, and the entries Entry
// writes for its keys parse back to the same keys.
func FuzzParse(f *testing.F) {
	if src, err := os.ReadFile(examplePath); err == nil {
		f.Add(src)
	}
	star := `flows: ["*"]`
	for _, doc := range []string{
		"",
		"keys: []\n",
		"keys:\n",
		"kyes: []\n",
		"keys: []\n---\nkeys: []\n",
		"\xef\xbb\xbfkeys:\r\n  - id: a\r\n    tenant: acme\r\n    sha256: " + hashA + "\r\n    flows: [\"*\"]\r\n",
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: [*]")),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: [x, y]", "rate: 0.5")),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "rate: 1e300")),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, `rate: "fast"`, "burst: 1.5")),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star), entry("id: a", "tenant: acme", "sha256: "+hashA, star)),
		keysDoc(entry("id: &x a", "tenant: *x", "sha256: "+hashA, star), "  - *x\n"),
		keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, star, "<<: {rate: 1}")),
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		set, err := access.Parse("fuzz.yaml", src)
		if err != nil {
			var list access.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			for i, e := range list {
				if i > 0 && e.Line < list[i-1].Line {
					t.Fatalf("errors out of line order: %v", err)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !errorLine.MatchString(line) {
					t.Fatalf("error line %q is not PATH:LINE: message", line)
				}
			}
			if set != nil {
				t.Fatal("Parse returned a Set with its errors")
			}
			return
		}
		again, err := access.Parse("fuzz.yaml", set.Source())
		if err != nil {
			t.Fatalf("Source() does not parse: %v", err)
		}
		if diff := cmp.Diff(set.Keys(), again.Keys(), keyFields); diff != "" {
			t.Fatalf("Parse(Source()) (-first +again):\n%s", diff)
		}
		if set.Len() == 0 {
			return
		}
		var doc strings.Builder
		doc.WriteString("keys:\n")
		var want []access.Key
		for _, k := range set.Keys() {
			flows := k.Flows
			if k.AllFlows {
				flows = []string{"*"}
			}
			e := access.Entry(k.ID, k.Tenant, flows, k.Rate, k.Burst, k.Hash)
			k.Line = strings.Count(doc.String(), "\n") + 1
			want = append(want, k)
			doc.WriteString(e)
		}
		rebuilt, err := access.Parse("fuzz.yaml", []byte(doc.String()))
		if err != nil {
			t.Fatalf("the entries of the keys do not parse:\n%s\n%v", doc.String(), err)
		}
		if diff := cmp.Diff(want, rebuilt.Keys(), keyFields); diff != "" {
			t.Fatalf("entries of the keys (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	const n = 1000
	var doc strings.Builder
	doc.WriteString("keys:\n")
	keys := make([]string, n)
	for i := range keys {
		key, err := access.Generate()
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = key
		doc.WriteString(access.Entry("key-"+strconv.Itoa(i), "acme", []string{"order-intake"}, 50, 100, access.HashKey(key)))
	}
	set, err := access.Parse("access.yaml", []byte(doc.String()))
	if err != nil {
		b.Fatal(err)
	}
	if set.Len() != n {
		b.Fatalf("Len() = %d, want %d", set.Len(), n)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := set.Lookup(keys[i%n]); !ok {
			b.Fatal("a key was not found")
		}
		i++
	}
}

// TestErrorsNeverEchoAKeyInAnyField: a key pasted into access.yaml never
// reaches an error message (errors go to the sync_failed log, the
// registry's sync state, GET /status, /api/flows, the UI and nexus
// status), whatever field it was pasted in: the name rule's error and the
// description of a wrong value once quoted it whole.
func TestErrorsNeverEchoAKeyInAnyField(t *testing.T) {
	key, err := access.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(key, access.KeyPrefix)[:16]
	for name, doc := range map[string]string{
		"tenant":       keysDoc(entry("id: a", "tenant: "+key, "sha256: "+hashA, `flows: ["*"]`)),
		"flows":        keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: ["+key+"]")),
		"flows, block": keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows:\n      - "+key)),
		"flows, twice": keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: ["+key+", "+key+"]")),
		"flows, alone": keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: "+key)),
		"tenant, list": keysDoc(entry("id: a", "tenant: ["+key+"]", "sha256: "+hashA, `flows: ["*"]`)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := access.Parse("access.yaml", []byte(doc))
			if err == nil {
				t.Fatalf("Parse succeeded on\n%s", doc)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error echoes the key pasted as the %s: %v", name, err)
			}
		})
	}
}

// TestLongFlowListParsesInLinearTime: an access.yaml of 1 MiB (git sync's
// ceiling on the file) holding one key whose flows list every name it can
// parses in moments. Each name was checked against every name before it
// for a duplicate: 200,000 names took over a minute of CPU, during which
// the sync of the commit waited.
func TestLongFlowListParsesInLinearTime(t *testing.T) {
	var b strings.Builder
	b.WriteString(entry("id: a", "tenant: acme", "sha256: "+hashA))
	b.WriteString("    flows: [")
	n := 0
	for ; b.Len() < 1<<20-16; n++ {
		if n > 0 {
			b.WriteString(",")
		}
		b.WriteString("x" + strconv.FormatInt(int64(n), 36))
	}
	b.WriteString("]\n")
	start := time.Now()
	s, err := access.Parse("access.yaml", []byte(keysDoc(b.String())))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a flows list of %d names took %v to parse", n, took)
	}
	if k := s.Keys()[0]; len(k.Flows) != n {
		t.Errorf("%d flows parsed, want %d", len(k.Flows), n)
	}
}
