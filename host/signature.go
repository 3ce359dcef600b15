package host

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signatures (when secrets are configured): the caller sends
//
//	X-Nexus-Timestamp: <unix seconds>
//	X-Nexus-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>[,v1=…]
//
// Up to MaxSignatures values; any one valid for any secret passes. The
// timestamp must be within SignatureWindow of the server's clock, counted
// in whole seconds as the timestamp is: the server's second (its clock
// truncated) at most 300 from the timestamp, either way.
const (
	MaxSignatures   = 8
	SignatureWindow = 300 * time.Second
)

// The WWW-Authenticate challenges of a signature's 401 (RFC 9110 requires
// one on every 401): the scheme the door expects, named after its header,
// as Bearer names the key's.
const (
	// SignatureChallenge answers a door's request whose X-Nexus-Signature
	// is refused.
	SignatureChallenge = "Nexus-Signature"
	// HubSignatureChallenge answers a POST /hooks/git whose
	// X-Hub-Signature-256 is refused.
	HubSignatureChallenge = "Hub-Signature-256"
)

// checkSignature verifies the body's signature after it is read and before
// it is parsed; it answers 401 itself and returns false.
func (s *Server) checkSignature(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if len(s.cfg.Secrets) == 0 {
		return true
	}
	if msg := verifySignature(s.cfg.Secrets, r.Header.Values("X-Nexus-Timestamp"), r.Header.Values("X-Nexus-Signature"), body, s.cfg.Now()); msg != "" {
		w.Header().Set("WWW-Authenticate", SignatureChallenge)
		writeError(w, http.StatusUnauthorized, msg)
		return false
	}
	return true
}

// verifySignature returns "" for a valid signature, else why not.
func verifySignature(secrets, timestamps, signatures []string, body []byte, now time.Time) string {
	switch {
	case len(timestamps) > 1:
		return "more than one X-Nexus-Timestamp header: send one"
	case len(signatures) > 1:
		return "more than one X-Nexus-Signature header: send one, its values comma-separated"
	case len(timestamps) == 0 || len(signatures) == 0:
		return "missing signature: send one X-Nexus-Timestamp and one X-Nexus-Signature header"
	}
	ts := timestamps[0]
	if ts == "" || len(ts) > 18 || strings.TrimLeft(ts, "0123456789") != "" {
		return "malformed X-Nexus-Timestamp: unix seconds expected"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "malformed X-Nexus-Timestamp: unix seconds expected"
	}
	// whole seconds on both sides: a timestamp 300 s old passes for the
	// whole of the server's second at the edge, not only at its start
	now = time.Unix(now.Unix(), 0)
	if !withinWindow(now, time.Unix(sec, 0)) {
		if withinWindow(now, time.UnixMilli(sec)) {
			// JavaScript's Date.now(), the usual mistake: say so rather
			// than that it is 50,000 years away
			return "malformed X-Nexus-Timestamp: unix seconds expected, not milliseconds"
		}
		return "signature timestamp is more than 300 s away from the server's clock"
	}
	// split no further than the count allows: a header of many commas
	// costs nothing to refuse
	values := strings.SplitN(signatures[0], ",", MaxSignatures+1)
	if len(values) > MaxSignatures {
		return "too many signatures: at most 8 v1= values"
	}
	var sigs [][]byte
	for _, v := range values {
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(v), "v1=")
		if !ok {
			return "malformed X-Nexus-Signature: v1=<hex> values expected"
		}
		sig, err := hex.DecodeString(hexSig)
		if err != nil || len(sig) != sha256.Size {
			return "malformed X-Nexus-Signature: v1=<hex> values expected"
		}
		sigs = append(sigs, sig)
	}
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return ""
			}
		}
	}
	return "signature does not match"
}

// withinWindow reports whether t is at most SignatureWindow from now.
func withinWindow(now, t time.Time) bool {
	d := now.Sub(t)
	return d <= SignatureWindow && d >= -SignatureWindow
}

// parseHubSignature reads an X-Hub-Signature-256 value: "sha256=" and the
// 32-byte MAC in hex.
func parseHubSignature(header string) ([]byte, bool) {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return nil, false
	}
	sig, err := hex.DecodeString(hexSig)
	return sig, err == nil
}
