package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/naming"
)

const keyUsage = `Usage: nexus key generate --tenant T --flows a,b --rate N [--burst N] [--id ID]

Prints a new random access key once, and the access.yaml entry to commit for
it. Only the key's SHA-256 goes into access.yaml; the key itself is stored
nowhere, so keep it now. --flows '*' allows every flow of the tenant; --rate 0
gives the key no rate limit.

Flags:
`

func runKey(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("key generate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tenant := fs.String("tenant", "", "the `tenant` the key belongs to (required)")
	flows := fs.String("flows", "", "comma-separated `flows` the key may call, or '*' (required)")
	rate := fs.Float64("rate", 0, "requests per second (`N`, a token bucket), required; 0 means unlimited")
	burst := fs.Int("burst", 0, "the bucket's size (`N`); 0 means the rate rounded up")
	id := fs.String("id", "", "the key's `id` in logs and the UI (default TENANT-XXXXXXXX)")
	if len(args) == 0 || args[0] != "generate" {
		return noSubcommand(args, "nexus key", "generate", keyUsage, fs, stdout, stderr)
	}
	rest, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, keyUsage, fs)
		return exitOK
	}
	if err == nil {
		err = checkKeyFlags(fs, *tenant, *flows, *rate, *burst, rest)
	}
	if err == nil && *id == "" && flagGiven(fs, "id") {
		// --id "$ID" with ID unset: not the default id without a word
		err = errors.New("--id is empty: give an id, or leave it out for TENANT-XXXXXXXX")
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus key generate: %v\n", err)
		return refusalExit(err)
	}
	key, err := access.Generate()
	if err != nil {
		fmt.Fprintf(stderr, "nexus key generate: %v\n", err)
		return exitError
	}
	hash := access.HashKey(key)
	if *id == "" {
		*id = fmt.Sprintf("%s-%x", *tenant, hash[:4])
	}
	list := strings.Split(*flows, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	entry := access.Entry(*id, *tenant, list, *rate, *burst, hash)
	if _, err := access.Parse("entry", []byte("keys:\n"+entry)); err != nil {
		// the entry's errors are the flags' (its lines mean nothing to
		// the caller): one line each
		var list access.ErrorList
		if !errors.As(err, &list) {
			list = access.ErrorList{{Msg: err.Error()}}
		}
		for _, e := range list {
			fmt.Fprintf(stderr, "nexus key generate: %s\n", e.Msg)
		}
		return exitUsage
	}
	if _, err := fmt.Fprintf(stdout, "key: %s\n\nKeep the key now: it is shown once and stored nowhere.\nAdd this entry under keys: in access.yaml and commit it:\n\n%s", key, entry); err != nil {
		// the key is stored nowhere: a script must not go on without it
		fmt.Fprintf(stderr, "nexus key generate: the key could not be written out (%v): it is lost; generate another\n", err)
		return exitError
	}
	return exitOK
}

// checkKeyFlags checks the flags of key generate (fs, which holds the
// values given): a --tenant, --flows or --rate left out is bad usage, a
// name given empty (an unset variable) the name rule's to refuse. --rate
// is required as server.md's command table gives it, beside --tenant and
// --flows and not in brackets: a key without a limit is asked for with
// --rate 0, not made by leaving the flag out.
func checkKeyFlags(fs *flag.FlagSet, tenant, flows string, rate float64, burst int, rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q", rest[0])
	case tenant == "" && !flagGiven(fs, "tenant"):
		return errors.New("--tenant is required")
	case flows == "" && !flagGiven(fs, "flows"):
		return errors.New("--flows is required ('*' for every flow of the tenant)")
	case !flagGiven(fs, "rate"):
		return errors.New("--rate is required: requests per second, 0 for no limit")
	case rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0):
		return errors.New("--rate must be a number of requests per second, 0 (unlimited) or more")
	case burst < 0:
		return errors.New("--burst must be 0 (the default) or more")
	case burst > 0 && rate == 0:
		return errors.New("--burst needs a --rate above 0")
	}
	// the tenant's error names the flow it pairs with: the one --flows
	// gives, or any when it gives several or none (an empty value)
	field := naming.Tenant(strings.TrimSpace(flows))
	field.Alone = strings.Contains(flows, ",") || field.Flow == ""
	if err := naming.Check(tenant, field); err != nil {
		return err
	}
	for _, f := range strings.Split(flows, ",") {
		if f = strings.TrimSpace(f); f != "*" {
			if err := naming.Check(f, naming.Flow(tenant)); err != nil {
				return err
			}
		}
	}
	return nil
}
