package access

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/nexushq/nexus/naming"
)

// KeyPrefix starts every key Generate makes. Parse refuses an id or a sha256
// that starts with it: a key pasted there would be committed in the clear.
const KeyPrefix = "nxk_"

// keyBytes is the number of random bytes in a generated key.
const keyBytes = 32

// Generate returns a new random key: KeyPrefix and 64 lowercase hexadecimal
// characters (32 bytes from crypto/rand). Show it once; store only HashKey
// of it.
func Generate() (key string, err error) {
	var b [keyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating a key: %w", err)
	}
	return KeyPrefix + hex.EncodeToString(b[:]), nil
}

// Entry returns the access.yaml entry to commit for a key: a list item of
// keys: with id, tenant, sha256 (the hash in hex), flows as a flow list
// (["*"] for every flow of the tenant), rate and burst, ending with a
// newline. A rate of 0 or less (unlimited) writes neither rate nor burst; a
// burst below 1 writes the default burst of the rate. Names that are not
// plain valid names are written quoted, so no argument can add a line. Parse
// reads the entry back, under keys:, as the same Key.
func Entry(id, tenant string, flows []string, rate float64, burst int, hash [32]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - id: %s\n", yamlName(id))
	fmt.Fprintf(&b, "    tenant: %s\n", yamlName(tenant))
	fmt.Fprintf(&b, "    sha256: %s\n", hex.EncodeToString(hash[:]))
	names := make([]string, len(flows))
	for i, f := range flows {
		names[i] = yamlName(f)
	}
	fmt.Fprintf(&b, "    flows: [%s]\n", strings.Join(names, ", "))
	if rate > 0 {
		if burst < 1 {
			burst = defaultBurst(rate)
		}
		fmt.Fprintf(&b, "    rate: %s\n", strconv.FormatFloat(rate, 'f', -1, 64))
		fmt.Fprintf(&b, "    burst: %d\n", burst)
	}
	return b.String()
}

// yamlName writes a name for Entry: plain when it is a valid name YAML reads
// as text, else double-quoted ("*", "null", anything the rule refuses).
func yamlName(s string) string {
	if naming.Valid(s) && s != "null" {
		return s
	}
	return strconv.Quote(s)
}

// maxDefaultBurst caps the default burst of a very large rate.
const maxDefaultBurst = math.MaxInt32

// defaultBurst is the burst of a key that sets rate but not burst: one
// second's worth of requests, at least 1.
func defaultBurst(rate float64) int {
	c := math.Ceil(rate)
	if c >= maxDefaultBurst {
		return maxDefaultBurst
	}
	return max(1, int(c))
}
