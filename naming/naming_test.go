package naming

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		field Field
		want  string // "" means valid
	}{
		{"acme", Flow("x"), ""},
		{"order-intake", Flow("acme"), ""},
		{"a_b-9", Tenant("f"), ""},
		{"9lives", Tenant("f"), ""},
		{strings.Repeat("a", 64), Flow("acme"), ""},
		{"a.b", Flow("acme"), `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		{"a.b", Tenant("orders"), `invalid name "a.b" for tenant (flow "orders"): character '.' at position 2 is not allowed`},
		{"../x", Queue("acme", "orders"), `invalid name "../x" for queue (tenant "acme", flow "orders"): character '.' at position 1 is not allowed`},
		{"Orders", Flow("acme"), `invalid name "Orders" for flow (tenant "acme"): character 'O' at position 1 is not allowed`},
		{"-x", Flow("acme"), `invalid name "-x" for flow (tenant "acme"): character '-' at position 1 is not allowed`},
		{"_x", Flow("acme"), `invalid name "_x" for flow (tenant "acme"): character '_' at position 1 is not allowed`},
		{"a\x00", Flow("acme"), `invalid name "a\x00" for flow (tenant "acme"): character '\x00' at position 2 is not allowed`},
		{"é", Flow("acme"), `invalid name "é" for flow (tenant "acme"): character 'é' at position 1 is not allowed`},
		{"ab\xff", Flow("acme"), `invalid name "ab\xff" for flow (tenant "acme"): character '\xff' at position 3 is not allowed`},
		{"a b", Flow("acme"), `invalid name "a b" for flow (tenant "acme"): character ' ' at position 2 is not allowed`},
		{"a/b", Flow("acme"), `invalid name "a/b" for flow (tenant "acme"): character '/' at position 2 is not allowed`},
		{"", Flow("acme"), `invalid name "" for flow (tenant "acme"): the name is empty`},
		{strings.Repeat("a", 65), Flow("acme"), `invalid name "` + strings.Repeat("a", 65) + `" for flow (tenant "acme"): the name is 65 characters long, more than 64`},
		{strings.Repeat("a", 128), Flow("acme"), `invalid name "` + strings.Repeat("a", 128) + `" for flow (tenant "acme"): the name is 128 characters long, more than 64`},
		// a longer name is cut after 64 characters, and so is the other of
		// the pair: the error stays one short line
		{strings.Repeat("a", 60000), Flow(strings.Repeat("é", 200)), `invalid name "` + strings.Repeat("a", 64) + `"… for flow (tenant "` + strings.Repeat("é", 64) + `"…): the name is 60000 characters long, more than 64`},
		{strings.Repeat("é", 129), Tenant("x"), `invalid name "` + strings.Repeat("é", 64) + `"… for tenant (flow "x"): the name is 129 characters long, more than 64`},
	}
	for _, tt := range tests {
		err := Check(tt.name, tt.field)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Check(%q):\n got %s\nwant %s", tt.name, got, tt.want)
		}
		if Valid(tt.name) != (tt.want == "") {
			t.Errorf("Valid(%q) = %v, want %v", tt.name, Valid(tt.name), tt.want == "")
		}
	}
}

// TestShorten: a log line shows a name of at most twice MaxLen characters
// whole, and a longer one as its first MaxLen characters and "…", counted
// in characters (as Quote cuts it).
func TestShorten(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"", ""},
		{"acme", "acme"},
		{strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{strings.Repeat("a", 129), strings.Repeat("a", 64) + "…"},
		{strings.Repeat("é", 129), strings.Repeat("é", 64) + "…"},
		{"\xff" + strings.Repeat("a", 200), "\xff" + strings.Repeat("a", 63) + "…"},
	} {
		if got := Shorten(tt.name); got != tt.want {
			t.Errorf("Shorten(%.20q… of %d bytes) = %q, want %q", tt.name, len(tt.name), got, tt.want)
		}
	}
}

// FuzzCheck holds the rule's promise: a valid name is a single local path
// element, lowercase, of at most MaxLen bytes; an invalid one always gets a
// one-line error that quotes it.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"acme", "../x", "a.b", "A", "", "a\x00", "-", strings.Repeat("z", 65), "é", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if msg := checkPromise(name); msg != "" {
			t.Fatal(msg)
		}
	})
}

// checkPromise returns "" when name is handled as the rule promises, else
// what went wrong: a valid name is a single local path element, lowercase,
// of at most MaxLen bytes, and Valid agrees with Check; an invalid one
// gets a one-line error that says so.
func checkPromise(name string) string {
	err := Check(name, Queue("acme", "orders"))
	if (err == nil) != Valid(name) {
		return fmt.Sprintf("Check(%q) = %v but Valid = %v", name, err, Valid(name))
	}
	if err == nil {
		if !filepath.IsLocal(name) || strings.ContainsAny(name, `./\`+"\x00") || strings.ToLower(name) != name || len(name) > MaxLen || name != filepath.Base(name) {
			return fmt.Sprintf("accepted %q", name)
		}
		return ""
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "invalid name ") {
		return fmt.Sprintf("bad error text %q", msg)
	}
	return ""
}

// TestCheckProperty holds checkPromise over 100,000 generated names
// (RELIABILITY E.20's figure; FuzzCheck runs only its seeds in CI): 1 to
// MaxLen+6 characters drawn mostly from the allowed ones, with uppercase,
// dots, slashes, backslashes, NUL, spaces and non-ASCII mixed in, so that
// about half are valid and the rest fail at every position.
func TestCheckProperty(t *testing.T) {
	const cases = 100_000
	allowed := "abcdefghijklmnopqrstuvwxyz0123456789-_"
	hostile := []string{"A", "Z", ".", "..", "/", `\`, "\x00", " ", "é", "\u212a", "\xff", ":", "%2e"}
	rng := rand.New(rand.NewPCG(20, 64))
	valid, tooLong := 0, 0
	var b strings.Builder
	for range cases {
		b.Reset()
		n := 1 + rng.IntN(MaxLen+6)
		hostileOdds := []int{0, 0, 200, 20}[rng.IntN(4)] // none in half the names
		for range n {
			if hostileOdds > 0 && rng.IntN(hostileOdds) == 0 {
				b.WriteString(hostile[rng.IntN(len(hostile))])
			} else {
				b.WriteByte(allowed[rng.IntN(len(allowed))])
			}
		}
		name := b.String()
		if msg := checkPromise(name); msg != "" {
			t.Fatal(msg)
		}
		if Valid(name) {
			valid++
		} else if len(name) > MaxLen {
			tooLong++
		}
	}
	if valid < cases/4 || tooLong == 0 {
		t.Fatalf("%d of %d generated names valid, %d too long: the generator no longer tests both sides of the rule", valid, cases, tooLong)
	}
	t.Logf("%d names: %d valid, %d refused and longer than MaxLen", cases, valid, tooLong)
}
