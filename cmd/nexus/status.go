package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
	"github.com/nexushq/nexus/scheduler"
)

const statusUsage = `Usage: nexus status [--db FILE]

Prints what is deployed, read from the registry (no server needed), as
key: value lines: the registry's path, the live commit, the time of the last
sync, the number of flows, the generation, the last refused commit with its
errors, access_error when the stored access keys do not parse (no key is
accepted until keys are published again), a schedule: line per cron flow (its next tick in UTC), then a
flow: line per flow (tenant/name and version).

Flags:
`

func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := dbFlag(fs)
	rest, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, statusUsage, fs)
		return exitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus status: %v\n", err)
		return exitUsage
	}
	ctx := context.Background()
	reg, path, err := readRegistry(ctx, *db)
	if err != nil {
		fmt.Fprintf(stderr, "nexus status: %v\n", err)
		return exitError
	}
	// a registry that does not exist reads as an empty one
	var st registry.Status
	var flows []*registry.LiveFlow
	var schedules []registry.Schedule
	var accessErr error
	if reg != nil {
		defer reg.Close()
		// the sync's record and the set it lists in one read: a
		// publication between two reads printed its commit beside the
		// refused commit it cleared
		var live *registry.LiveSet
		st, live, err = reg.Snapshot(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "nexus status: reading %s: %v\n", path, err)
			return exitError
		}
		// an @every schedule's next tick counts from its last one, which
		// the scheduler records in the state directory
		cronDir := filepath.Join(filepath.Dir(path), "cron")
		accessErr = live.AccessErr()
		flows, schedules = live.Flows(), live.Schedules(time.Now(), func(tenant, name string, sc *flow.Schedule, now time.Time) time.Time {
			return scheduler.NextTick(cronDir, tenant, name, sc, now)
		})
	}
	fmt.Fprintf(stdout, "registry: %s\n", path)
	fmt.Fprintf(stdout, "commit: %s\n", orNone(st.Commit))
	fmt.Fprintf(stdout, "synced_at: %s\n", formatTime(st.SyncedAt))
	fmt.Fprintf(stdout, "flows: %d\n", st.Flows)
	fmt.Fprintf(stdout, "generation: %d\n", st.Generation)
	if st.LastError == nil {
		fmt.Fprintln(stdout, "last_error: none")
	} else {
		fmt.Fprintf(stdout, "last_error: commit %s refused at %s\n", st.LastError.Commit, formatTime(st.LastError.At))
		for _, e := range st.LastError.Errors {
			fmt.Fprintf(stdout, "  %s\n", e)
		}
	}
	if accessErr != nil {
		// keys an earlier build stored that this one refuses: no key is
		// accepted until keys are published again
		lines := strings.Split(accessErr.Error(), "\n")
		fmt.Fprintf(stdout, "access_error: %s\n", lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	for _, sc := range schedules {
		fmt.Fprintf(stdout, "schedule: %s/%s %q %s next %s\n", sc.Tenant, sc.Flow, sc.Spec, sc.Zone, formatTime(sc.Next))
	}
	for _, lf := range flows {
		state := ""
		if lf.Corrupt != nil {
			state = " CORRUPT: " + lf.Corrupt.Error()
		}
		fmt.Fprintf(stdout, "flow: %s/%s v%d%s\n", lf.Tenant, lf.Name, lf.Version, state)
	}
	return exitOK
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// formatTime prints a time the way every command does: RFC 3339, UTC,
// whole seconds.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
