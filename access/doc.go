// Package access owns access.yaml, the file of API keys in the config repo:
// parsing and validating it, hashing keys and looking a presented key up by
// its hash in constant time, and generating new keys with the entry an
// operator commits. A key names its tenant, the flows it may call and its
// rate limit; the key itself is never stored, only its SHA-256.
//
// The file is one YAML mapping with a single field, keys, a list of entries:
//
//	keys:
//	  - id: acme-orders            # named in logs and the UI; never the secret
//	    tenant: acme
//	    sha256: 3b6a…              # hex SHA-256 of the key
//	    flows: [forward-order, order-intake]   # or ["*"]
//	    rate: 50                   # requests per second (token bucket)
//	    burst: 100
//
// id, tenant, sha256 and flows are required; rate and burst are optional (no
// rate: no limit; no burst: the rate rounded up, at least 1). Parse reports
// every error of the file as "PATH:LINE: message", in line order, and never
// quotes a value that may be a key.
package access
