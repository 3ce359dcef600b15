package host

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerifySignature feeds the signature check arbitrary X-Nexus-Timestamp
// and X-Nexus-Signature values and bodies. It never panics, and it accepts
// a request only when the timestamp is within the window and one of the
// (at most 8) v1= values is the HMAC of that timestamp and body, whatever
// the spaces around it and the case of its hex.
func FuzzVerifySignature(f *testing.F) {
	now := time.Unix(1_786_000_000, 0)
	const secret = "fuzz-secret"
	sign := func(ts string, body []byte) string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		return hex.EncodeToString(mac.Sum(nil))
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	f.Add(ts, "v1="+sign(ts, []byte(`{"a":1}`)), []byte(`{"a":1}`))
	f.Add(ts, "v1="+sign(ts, []byte(`{}`))+", v1=00", []byte(`{}`))
	f.Add("+1786000000", "v1=", []byte(nil))
	f.Add("1786000301", "v2="+sign("1786000301", nil), []byte(nil))
	f.Add(ts, strings.Repeat("v1=ab,", 9), []byte("x"))
	f.Fuzz(func(t *testing.T, timestamp, signature string, body []byte) {
		verdict := verifySignature([]string{secret}, []string{timestamp}, []string{signature}, body, now)
		if verdict != "" {
			return
		}
		sec, err := strconv.ParseInt(timestamp, 10, 64)
		if err != nil || strings.TrimLeft(timestamp, "0123456789") != "" {
			t.Fatalf("accepted the timestamp %q", timestamp)
		}
		if d := now.Sub(time.Unix(sec, 0)); d > SignatureWindow || d < -SignatureWindow {
			t.Fatalf("accepted the timestamp %q, %v from now", timestamp, d)
		}
		values := strings.Split(signature, ",")
		if len(values) > MaxSignatures {
			t.Fatalf("accepted %d signatures", len(values))
		}
		want := sign(timestamp, body)
		for _, v := range values {
			if strings.EqualFold(strings.TrimSpace(v), "v1="+want) && strings.HasPrefix(strings.TrimSpace(v), "v1=") {
				return
			}
		}
		t.Fatalf("accepted %q for timestamp %q and body %q: none of its values is the HMAC %s", signature, timestamp, body, want)
	})
}
