package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

const dlqUsage = `Usage:
  nexus dlq list    [--tenant T] [--flow F] [--db FILE]
  nexus dlq replay  --tenant T --flow F --id N|--all [--db FILE]
  nexus dlq discard --tenant T --flow F --id N|--all [--db FILE]

list prints the pending dead letters, sorted by tenant, flow and id. replay
appends a dead letter's payload to its queue as a new message (new id, fresh
correlation ID, attempt 1) and marks the entry handled; a running worker
picks it up within its poll interval. discard marks the entry handled; its
body leaves the disk at the flow's next queue drain. With --all instead of
--id, every dead letter pending in the queue is replayed or discarded, oldest
first, one line each (after a downstream outage).

The queues are in the folder of --db (queues/ beside registry.db): pass the
--db the server uses.

Flags:
`

func runDLQ(args []string, stdout, stderr io.Writer) int {
	// one set of flags for the three subcommands, made first so that the
	// usage lists them whatever the arguments
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := dbFlag(fs)
	tenant := fs.String("tenant", "", "the `tenant` (a filter for list)")
	flowName := fs.String("flow", "", "the `flow` (a filter for list)")
	id := fs.String("id", "", "the dead letter's `id`, from nexus dlq list")
	all := fs.Bool("all", false, "replay or discard every pending dead letter of --tenant/--flow, oldest first")
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay" && args[0] != "discard") {
		return noSubcommand(args, "nexus dlq", "list, replay or discard", dlqUsage, fs, stdout, stderr)
	}
	sub := args[0]
	flagsOnce(fs) // a replay or a discard cannot be undone
	rest, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, dlqUsage, fs)
		return exitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	var n uint64 // 0: --all
	if err == nil && sub != "list" {
		switch {
		case *all && *id != "":
			err = fmt.Errorf("%s takes --id or --all, not both", sub)
		case *tenant == "" && !flagGiven(fs, "tenant") || *flowName == "" && !flagGiven(fs, "flow") || *id == "" && !*all:
			// left out: bad usage, naming what is missing; given empty,
			// the name rule's (below)
			var missing []string
			if *tenant == "" && !flagGiven(fs, "tenant") {
				missing = append(missing, "--tenant")
			}
			if *flowName == "" && !flagGiven(fs, "flow") {
				missing = append(missing, "--flow")
			}
			if *id == "" && !*all {
				missing = append(missing, "--id (or --all)")
			}
			err = fmt.Errorf("%s needs %s", sub, andList(missing))
		case *all:
		default:
			if n, err = strconv.ParseUint(*id, 10, 64); err != nil || n == 0 {
				err = fmt.Errorf("--id %q is not a message id (a whole number from nexus dlq list)", *id)
			}
		}
	}
	if err == nil && sub == "list" && (*id != "" || *all) {
		err = errors.New("list takes no --id or --all")
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitUsage
	}
	// the name rule, before anything is opened or created
	if err := checkNameFlags(fs, *tenant, *flowName); err != nil {
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return refusalExit(err)
	}
	dbPath, err := expandHome(*db)
	if err != nil {
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	}
	// the queues are beside the registry: a --db naming some other file
	// (a mistyped path, another program's database, a damaged registry)
	// would list "DLQ is empty"; it is opened as nexus status opens it.
	// One of an older schema is a registry all the same, and list and
	// discard read none of its tables (the dead letters are in the
	// queues' files): they take it as it is (replay reads the live set,
	// and refuses it then)
	reg, _, err := readRegistry(context.Background(), dbPath)
	if se, ok := errors.AsType[*registry.SchemaError](err); ok && se.Version < se.Known && sub != "replay" {
		err = nil
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	}
	if reg != nil {
		reg.Close()
	}
	root := filepath.Join(filepath.Dir(dbPath), "queues")
	switch sub {
	case "list":
		return dlqList(root, *tenant, *flowName, stdout, stderr)
	default:
		return dlqMark(sub, dbPath, root, *tenant, *flowName, n, stdout, stderr)
	}
}

// andList joins items as a sentence does: "a", "a and b", "a, b and c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// checkNameFlags applies the name rule to the --tenant and --flow of fs,
// given as tenant and flowName: a flag given empty (--tenant "$UNSET") is
// refused too, not taken for no filter. A filter no flow could match is a
// mistake to say, not an empty listing.
func checkNameFlags(fs *flag.FlagSet, tenant, flowName string) error {
	tenantGiven, flowGiven := tenant != "" || flagGiven(fs, "tenant"), flowName != "" || flagGiven(fs, "flow")
	if tenantGiven {
		field := naming.Tenant(flowName)
		field.Alone = !flowGiven
		if err := naming.Check(tenant, field); err != nil {
			return err
		}
	}
	if flowGiven {
		field := naming.Flow(tenant)
		field.Alone = !tenantGiven
		return naming.Check(flowName, field)
	}
	return nil
}

// flagGiven reports whether the flag name was given on the command line
// (empty perhaps), not left at its default.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// holdsDeadLetters reports whether the folder dir (a queue's, or a
// tenant's of queues) holds a dlq.log: an empty folder left over is not
// worth a word at every listing.
func holdsDeadLetters(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, "dlq.log")); err == nil {
		return true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, err := os.Lstat(filepath.Join(dir, e.Name(), "dlq.log")); e.IsDir() && err == nil {
			return true
		}
	}
	return false
}

func dlqList(root, tenant, flowName string, stdout, stderr io.Writer) int {
	names, skipped, err := queue.QueueFolders(root, nil)
	if err != nil {
		fmt.Fprintf(stderr, "nexus dlq list: %v\n", err)
		return exitError
	}
	for _, folder := range skipped {
		if flowName == "" && (tenant == "" || strings.HasPrefix(folder+"/", tenant+"/")) && holdsDeadLetters(filepath.Join(root, folder)) {
			fmt.Fprintf(stderr, "nexus dlq list: %s: not listed: the folder's name breaks the rule for a name that becomes a path (made by hand, or by an older build)\n",
				filepath.Join(root, folder))
		}
	}
	// each queue's listing holds ids and offsets (16 bytes a dead letter);
	// the dead letters are read again as they are printed, a queue at a
	// time, in whole lines of a thousand at most
	type listing struct {
		tenant, flow string
		l            *queue.DeadLetterList
	}
	var lists []listing
	total := 0
	for _, n := range names {
		if tenant != "" && n[0] != tenant || flowName != "" && n[1] != flowName {
			continue
		}
		l, damage, err := queue.ListDeadLetters(root, n[0], n[1], nil)
		if err != nil {
			fmt.Fprintf(stderr, "nexus dlq list: %s/%s: %v\n", n[0], n[1], err)
			return exitError
		}
		for _, d := range damage {
			// the listing stands without it; the frame leaves the disk
			// at the queue's next rewrite of dlq.log, logged there
			fmt.Fprintf(stderr, "nexus dlq list: %s/%s: %s\n", n[0], n[1], d.DeadLetterText())
		}
		if l.Len() > 0 {
			lists = append(lists, listing{n[0], n[1], l})
			total += l.Len()
		}
	}
	if total == 0 {
		fmt.Fprintln(stdout, "DLQ is empty")
		return exitOK
	}
	var b strings.Builder
	fmt.Fprintf(&b, "DLQ: %d pending message(s)\n", total)
	var writeErr error // the output's: run says it, once
	flush := func() {
		if writeErr == nil {
			_, writeErr = io.WriteString(stdout, b.String())
		}
		b.Reset()
	}
	lines := 0
	for _, e := range lists {
		gone, err := e.l.Each(func(d queue.DeadLetter) error {
			fmt.Fprintf(&b, "\n  id=%d tenant=%s flow=%s\n", d.ID, e.tenant, e.flow)
			fmt.Fprintf(&b, "    enqueued_at: %s\n", formatTime(d.EnqueuedAt))
			fmt.Fprintf(&b, "    failed_at:   %s\n", formatTime(d.FailedAt))
			fmt.Fprintf(&b, "    attempts:    %d\n", d.Attempts)
			fmt.Fprintf(&b, "    last_error:  %s\n", oneLine(d.LastError))
			if lines++; lines%dlqListLines == 0 {
				flush()
			}
			return writeErr
		})
		if writeErr != nil {
			return exitOK
		}
		if err != nil {
			flush()
			fmt.Fprintf(stderr, "nexus dlq list: %s/%s: %v\n", e.tenant, e.flow, err)
			return exitError
		}
		if gone > 0 {
			// the total printed first counted them: say where they went
			flush()
			what := "1 dead letter counted above was replayed or discarded, and rewritten out of dlq.log, before it was printed"
			if gone > 1 {
				what = fmt.Sprintf("%d dead letters counted above were replayed or discarded, and rewritten out of dlq.log, before they were printed", gone)
			}
			fmt.Fprintf(stderr, "nexus dlq list: %s/%s: %s\n", e.tenant, e.flow, what)
		}
	}
	flush()
	return exitOK
}

// dlqListLines is how many dead letters nexus dlq list prints in one
// write.
const dlqListLines = 1000

// oneLine returns s as it is when every character of it prints, else as
// the body of the Go string that holds it (strconv.Quote without the
// quotes: \n, \x1b, \u2028, and so \\ and \" too): a dead letter's
// last_error, whatever it echoes, stays on its line of the listing (the
// host escapes the errors it answers so, on control characters).
func oneLine(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// dlqMark replays or discards (sub) the dead letter id of tenant/flowName,
// or with id 0 (--all) every one pending, oldest first.
func dlqMark(sub, dbPath, root, tenant, flowName string, id uint64, stdout, stderr io.Writer) int {
	// the pending ids, sorted (8 bytes a dead letter, none decoded)
	peek, err := queue.Peek(root, tenant, flowName, nil)
	var pending []uint64
	if err == nil {
		pending, err = peek.PendingIDs()
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	}
	// nothing is opened, created or written for nothing to do
	switch {
	case id != 0 && !slices.Contains(pending, id):
		fmt.Fprintln(stderr, &queue.NotPendingError{Tenant: tenant, Flow: flowName, ID: id})
		return exitError
	case id == 0 && len(pending) == 0:
		fmt.Fprintf(stdout, "no pending dead letter tenant=%s flow=%s\n", tenant, flowName)
		return exitOK
	}
	if sub == "replay" {
		// a worker drops a message of a flow that is not live: the replay
		// would say "replayed" and the message would be lost (the API
		// refuses it too)
		if err := replayable(dbPath, tenant, flowName); err != nil {
			fmt.Fprintf(stderr, "nexus dlq replay: %v\n", err)
			return exitError
		}
	}
	// what the queue's recovery finds (and leaves as a server's does), at
	// Open or as the replay takes its id: said, one line each; the
	// replay or discard goes on
	say := func(d queue.Damage) { fmt.Fprintf(stderr, "nexus dlq %s: %s/%s: %s\n", sub, tenant, flowName, d) }
	// an operator's Ctrl-C (or a SIGTERM) while the command waits for the
	// append lock another process holds ends it, having written nothing
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted := func() int {
		what := "replayed"
		if sub == "discard" {
			what = "discarded"
		}
		fmt.Fprintf(stderr, "nexus dlq %s: interrupted: nothing %s\n", sub, what)
		return exitError
	}
	q, damage, err := openContext(ctx, root, tenant, flowName, queue.Options{OnDamage: say})
	switch {
	case ctx.Err() != nil:
		return interrupted()
	case err != nil:
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	}
	defer q.Close()
	for _, d := range damage {
		say(d)
	}
	if id == 0 {
		// in chunks, each of which is done or not: a signal ends the
		// command as it did (the default action)
		stop()
		return dlqMarkAll(sub, q, pending[len(pending)-1], tenant, flowName, stdout, stderr)
	}
	if sub == "replay" {
		_, err = q.ReplayContext(ctx, id, queue.SourceReplay, flow.NewUUID())
	} else {
		err = q.MarkContext(ctx, id, queue.MarkDiscarded)
	}
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
		return interrupted()
	case errors.Is(err, queue.ErrNotPending):
		fmt.Fprintln(stderr, &queue.NotPendingError{Tenant: tenant, Flow: flowName, ID: id})
		return exitError
	case err != nil:
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	}
	if sub == "replay" {
		fmt.Fprintf(stdout, "replayed  id=%d tenant=%s flow=%s\n", id, tenant, flowName)
	} else {
		fmt.Fprintf(stdout, "discarded id=%d tenant=%s flow=%s\n%s\n", id, tenant, flowName, discardNote)
	}
	return exitOK
}

// openContext is queue.Open given up when ctx ends first (Open waits for
// the append lock another process holds): it returns ctx's error then,
// and the handle, opened later, is closed.
func openContext(ctx context.Context, root, tenant, flowName string, opts queue.Options) (*queue.Queue, []queue.Damage, error) {
	type opened struct {
		q      *queue.Queue
		damage []queue.Damage
		err    error
	}
	ch := make(chan opened, 1)
	go func() {
		q, damage, err := queue.Open(root, tenant, flowName, opts)
		ch <- opened{q, damage, err}
	}()
	select {
	case o := <-ch:
		return o.q, o.damage, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.err == nil {
				o.q.Close()
			}
		}()
		return nil, nil, context.Cause(ctx)
	}
}

// discardNote follows the lines of a discard.
const discardNote = "  the body leaves the disk at this flow's next queue drain; until then it is only hidden from listings"

// dlqMarkAll replays or discards (sub) every dead letter pending in q up to
// the id upTo (the newest listed), oldest first, in chunks that let the
// servers' appends through (queue.ReplayAll, MarkAll), one line each; one
// another process handles meanwhile is left to it. A dead letter that
// cannot be replayed (its payload is over the limit of a message) is left
// pending with a line on stderr, the others replayed, and the exit status
// is 1.
func dlqMarkAll(sub string, q *queue.Queue, upTo uint64, tenant, flowName string, stdout, stderr io.Writer) int {
	var n, skipped int
	var err error
	if sub == "replay" {
		n, err = q.ReplayAll(upTo, queue.SourceReplay, flow.NewUUID, func(r queue.Replayed) {
			fmt.Fprintf(stdout, "replayed  id=%d tenant=%s flow=%s\n", r.ID, tenant, flowName)
		}, func(k queue.Skipped) {
			skipped++
			fmt.Fprintf(stderr, "nexus dlq replay: left pending: %v\n", k.Err)
		})
	} else {
		n, err = q.MarkAll(upTo, queue.MarkDiscarded, func(id uint64) {
			fmt.Fprintf(stdout, "discarded id=%d tenant=%s flow=%s\n", id, tenant, flowName)
		})
	}
	switch {
	case err != nil:
		if n > 0 {
			fmt.Fprintf(stderr, "nexus dlq %s: %d done, then:\n", sub, n)
		}
		fmt.Fprintf(stderr, "nexus dlq %s: %v\n", sub, err)
		return exitError
	case skipped > 0:
		return exitError
	case n == 0:
		fmt.Fprintf(stdout, "no pending dead letter tenant=%s flow=%s\n", tenant, flowName)
	case sub == "discard":
		fmt.Fprintln(stdout, discardNote)
	}
	return exitOK
}

// replayable says whether the registry at dbPath has tenant/flow live, so
// that a dead letter of it may be replayed (registry.LiveSet.CanReplay); a
// registry that does not exist has no live flow.
func replayable(dbPath, tenant, flowName string) error {
	ctx := context.Background()
	reg, path, err := readRegistry(ctx, dbPath)
	if err != nil {
		return err
	}
	var live *registry.LiveSet
	if reg != nil {
		defer reg.Close()
		if live, err = reg.Load(ctx); err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
	}
	return live.CanReplay(tenant, flowName)
}
