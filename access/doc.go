// Package access owns access.yaml, the file of API keys in the config repo:
// parsing and validating it, hashing keys and looking a presented key up by
// its hash in constant time, and generating new keys with the entry an
// operator commits. A key names its tenant, the flows it may call and its
// rate limit; the key itself is never stored, only its SHA-256.
package access
