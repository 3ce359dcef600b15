package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
)

// Key is one entry of access.yaml.
type Key struct {
	// ID names the key in logs, answers and the UI; it is never the secret.
	ID string
	// Tenant is the only tenant whose flows the key may call.
	Tenant string
	// Hash is the SHA-256 of the key. The key itself is never stored.
	Hash [32]byte
	// Flows is the allowlist of flow names; nil when AllFlows is set.
	Flows []string
	// AllFlows is set by flows: ["*"]: every flow of Tenant.
	AllFlows bool
	// Rate is the refill rate of the key's token bucket in requests per
	// second; 0 means unlimited.
	Rate float64
	// Burst is the size of the token bucket; 0 when Rate is 0.
	Burst int
	// Line is the line of the entry in access.yaml.
	Line int

	// flowSet holds Flows when Parse read setFrom names or more; nil for a
	// shorter list, which Allows scans, and in a copy (Set.Keys), whose
	// Flows its caller may change
	flowSet map[string]bool
}

// setFrom is the length of a flows list from which Allows looks a name up
// in a set rather than scanning the list: BenchmarkAllowsScanOrSet finds
// the scan faster for one name, as fast for two, and slower from four
// (twice as slow at eight, 20 times at 64; a list of 180,000 took
// 0.2 to 0.8 ms a request).
const setFrom = 4

// Allows reports whether the key may call flow (of its own tenant): flow is
// in the allowlist, or the key holds every flow. A long list parsed is
// looked up in a set, in constant time; a short one is scanned.
func (k *Key) Allows(flow string) bool {
	switch {
	case k.AllFlows:
		return true
	case k.flowSet != nil:
		return k.flowSet[flow]
	}
	return slices.Contains(k.Flows, flow)
}

// Set is a parsed access.yaml: immutable, safe for concurrent use. A nil
// *Set holds no keys.
type Set struct {
	keys   []Key            // in file order
	byHash map[[32]byte]int // Key.Hash → index in keys
	source []byte           // the canonical bytes parsed
}

// Lookup finds the key a caller presented. It hashes presented with SHA-256,
// finds the entry by hash and confirms it with a constant-time comparison of
// the whole hash, so no plaintext is ever compared. The empty string matches
// nothing. The *Key belongs to the Set: read it, never modify it.
func (s *Set) Lookup(presented string) (*Key, bool) {
	if s == nil || len(presented) == 0 {
		return nil, false
	}
	sum := HashKey(presented)
	i, found := s.byHash[sum]
	if !found {
		return nil, false
	}
	k := &s.keys[i]
	if subtle.ConstantTimeCompare(sum[:], k.Hash[:]) != 1 {
		return nil, false
	}
	return k, true
}

// Holds reports whether the set holds the key whose hash is h (one look-up
// of its index, no copy of the keys).
func (s *Set) Holds(h [32]byte) bool {
	if s == nil {
		return false
	}
	_, ok := s.byHash[h]
	return ok
}

// Keys returns a copy of the keys, in file order.
func (s *Set) Keys() []Key {
	if s == nil {
		return nil
	}
	out := slices.Clone(s.keys)
	for i := range out {
		out[i].Flows = slices.Clone(out[i].Flows)
		out[i].flowSet = nil // the copy's Flows are its caller's to change
	}
	return out
}

// Len returns the number of keys.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// Source returns a copy of the canonical bytes the Set was parsed from (a
// leading byte order mark removed, CRLF turned into LF): what the registry
// stores. Parse(path, s.Source()) gives the same keys.
func (s *Set) Source() []byte {
	if s == nil {
		return nil
	}
	return slices.Clone(s.source)
}

// HashKey returns the SHA-256 of a key: what access.yaml stores (in hex) and
// what Lookup compares.
func HashKey(key string) [32]byte {
	// A key of usual length is copied to the stack rather than the heap: the
	// gate hashes one per request.
	var buf [128]byte
	if len(key) <= len(buf) {
		return sha256.Sum256(append(buf[:0], key...))
	}
	return sha256.Sum256([]byte(key))
}
