package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/nexushq/nexus/registry"
)

const journalUsage = `Usage: nexus journal [--tenant T] [--flow F] [--correlation-id C] [--limit N] [--db FILE]

Prints the execution history, newest first: time, door, tenant/flow and
version, outcome and status, duration, attempt, correlation ID, message id,
and the error when there was one.

Flags:
`

func runJournal(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("journal", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := dbFlag(fs)
	tenant := fs.String("tenant", "", "only this `tenant`")
	flowName := fs.String("flow", "", "only this `flow`")
	cid := fs.String("correlation-id", "", "only the executions of this `correlation ID` (a request's, a message's attempts)")
	limit := fs.Int("limit", 50, "at most `N` entries")
	rest, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, journalUsage, fs)
		return exitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil && *limit < 1 {
		err = errors.New("--limit must be at least 1")
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus journal: %v\n", err)
		return exitUsage
	}
	// the name rule, as nexus dlq applies it; a correlation ID given
	// empty (an unset variable) is not "every execution"
	if err := checkNameFlags(fs, *tenant, *flowName); err != nil || *cid == "" && flagGiven(fs, "correlation-id") {
		if err == nil {
			err = errors.New("--correlation-id is empty: give one, or leave it out")
		}
		fmt.Fprintf(stderr, "nexus journal: %v\n", err)
		return refusalExit(err)
	}
	ctx := context.Background()
	reg, path, err := readRegistry(ctx, *db)
	if err != nil {
		fmt.Fprintf(stderr, "nexus journal: %v\n", err)
		return exitError
	}
	if reg == nil { // none without a registry
		fmt.Fprintln(stdout, "the journal is empty")
		return exitOK
	}
	defer reg.Close()
	q := registry.JournalQuery{Tenant: *tenant, Flow: *flowName, CorrelationID: *cid}
	printed := 0
	var b strings.Builder
	for printed < *limit {
		q.Limit = min(journalPage, *limit-printed)
		entries, err := reg.Journal(ctx, q)
		if err != nil {
			fmt.Fprintf(stderr, "nexus journal: reading %s: %v\n", path, err)
			return exitError
		}
		b.Reset()
		for _, e := range entries {
			fmt.Fprintf(&b, "%s %-7s %s/%s v%d %s %d %dms attempt=%d correlation_id=%s",
				formatTime(e.At), e.Door, e.Tenant, e.Flow, e.Version, e.Outcome, e.Status, e.Duration.Milliseconds(), e.Attempt, e.CorrelationID)
			if e.MsgID != 0 {
				fmt.Fprintf(&b, " msg_id=%d", e.MsgID)
			}
			if e.Error != "" {
				fmt.Fprintf(&b, " error=%q", e.Error)
			}
			b.WriteByte('\n')
		}
		// whole lines: stdout escapes what does not print, a write at a time
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return exitOK // run says the output could not be written
		}
		printed += len(entries)
		if len(entries) < q.Limit {
			break
		}
		q.Before = &entries[len(entries)-1]
	}
	if printed == 0 {
		fmt.Fprintln(stdout, "the journal is empty")
	}
	return exitOK
}

// journalPage is how many entries nexus journal reads and prints at a
// time: it holds a page in memory, not every entry --limit asks for.
const journalPage = 1000
