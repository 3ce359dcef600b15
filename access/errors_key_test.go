package access_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
)

// TestErrorsNeverEchoAKeyPastedAsAFieldName: a key pasted on a line of
// its own in an entry, or at the top of the file, reads as a mapping key
// (YAML takes "nxk_…:" for a field name); the "unknown field" and "unknown
// top-level key" errors do not quote it (they did, into the sync_failed
// log, /status and the UI).
func TestErrorsNeverEchoAKeyPastedAsAFieldName(t *testing.T) {
	key, err := access.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(key, access.KeyPrefix)[:16]
	for name, doc := range map[string]string{
		"a field of an entry": keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, `flows: ["*"]`, key+":")),
		"a top-level key":     key + ":\n" + keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, `flows: ["*"]`)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := access.Parse("access.yaml", []byte(doc))
			if err == nil {
				t.Fatalf("Parse succeeded on\n%s", doc)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error echoes the key pasted as %s: %v", name, err)
			}
		})
	}
}

// TestErrorsNeverEchoAKeyInAValue: a key in a value of an entry is never
// quoted, alone or pasted with the "Bearer " of its header, nor through
// another field's error: the flows' errors name the tenant, and a key
// pasted as the tenant reached the log, /status and the UI through them.
func TestErrorsNeverEchoAKeyInAValue(t *testing.T) {
	key, err := access.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(key, access.KeyPrefix)[:16]
	for name, doc := range map[string]string{
		"the tenant, beside a bad flow name": keysDoc(entry("id: a", "tenant: "+key, "sha256: "+hashA, "flows: [Order-Intake]")),
		"the tenant, with Bearer":            keysDoc(entry("id: a", "tenant: Bearer "+key, "sha256: "+hashA, `flows: ["*"]`)),
		"the id, with Bearer":                keysDoc(entry("id: Bearer "+key, "tenant: acme", "sha256: "+hashA, `flows: ["*"]`)),
		"the sha256, with Bearer":            keysDoc(entry("id: a", "tenant: acme", "sha256: Bearer "+key, `flows: ["*"]`)),
		"a flow, with Bearer":                keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, `flows: [hello, "Bearer `+key+`"]`)),
		"the flows, not a list":              keysDoc(entry("id: a", "tenant: acme", "sha256: "+hashA, "flows: Bearer "+key)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := access.Parse("access.yaml", []byte(doc))
			if err == nil {
				t.Fatalf("Parse succeeded on\n%s", doc)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error echoes the key:\n%v", err)
			}
		})
	}
}
