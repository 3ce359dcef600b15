package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/registry"
)

const deployUsage = `Usage: nexus deploy [--db FILE] PATH...

Compiles flow files and publishes them into the registry, making each the
latest version of its flow; for installations without git. PATH may be flow
files, folders of them, or a config-repo folder (one holding access.yaml),
whose flows/ folder and access.yaml are published together. An access.yaml
named alone is published too, replacing the access keys; one per deploy.

Nothing is published if any file has an error: every error is printed as
FILE:LINE: message and the command exits 1. A file named alone that is not a
flow file is an error; Markdown in a folder that is not is skipped, with a
warning when its front matter looks meant for a flow. Otherwise it prints one line per
flow, "published acme/order-intake v3" or "unchanged acme/order-intake v2",
and one for the access keys when an access.yaml is published,
"published access keys of /srv/config/access.yaml (3 keys)" (files are named
by their absolute paths).
Flows not named are left as they are. Running servers pick the change up
within about a second.

Flags:
`

func runDeploy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := dbFlag(fs)
	paths, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, deployUsage, fs)
		return exitOK
	}
	if err == nil && len(paths) == 0 {
		// given nothing to do: the one line and the usage, as validate
		fmt.Fprintln(stderr, "nexus deploy: give at least one flow file or folder")
		printUsage(stderr, deployUsage, fs)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus deploy: %v\n", err)
		return exitUsage
	}

	// a version names its file: the same file given another way
	// (./repo, /home/ops/repo, repo/flows/acme/x.md) is the same file,
	// and an unchanged flow stays unchanged
	for i, p := range paths {
		if abs, err := filepath.Abs(p); err == nil {
			paths[i] = abs
		}
	}
	srcs, accessFiles, _, problems := readPaths(paths)
	// the key set published: a config repo's access.yaml, or one named
	// alone (it was checked and then left out: a key it no longer held,
	// revoked, stayed live); one of them per deploy
	var (
		keys     *access.Set
		keysFrom string // the access.yaml published
		repos    int
	)
	for _, a := range accessFiles {
		switch {
		case a.dir != "" && repos > 0:
			problems = append(problems, fmt.Sprintf("%s: a second config repo in one deploy: deploy one at a time", a.dir))
			continue
		case keysFrom != "":
			problems = append(problems, fmt.Sprintf("%s: a second access.yaml in one deploy, besides %s: deploy one key set at a time", a.path, keysFrom))
			continue
		}
		if a.dir != "" {
			repos++ // a config repo: its flows/ and its access.yaml
		}
		keysFrom = a.path
		if a.refused {
			continue
		}
		set, err := access.Parse(a.path, a.data)
		problems = append(problems, gitsync.AccessProblems(err)...)
		keys = set
	}
	warnSkipped(stderr, "deploy", srcs)
	flows, errs := flow.CompileSet(srcs)
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	if len(problems) == 0 && len(flows) == 0 && keys == nil {
		problems = append(problems, "no flow files found: nothing to publish")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		fmt.Fprintf(stderr, "nexus deploy: nothing published: %d error%s\n", len(problems), plural(len(problems)))
		return exitError
	}

	ctx := context.Background()
	reg, err := openRegistry(ctx, *db)
	if err != nil {
		fmt.Fprintf(stderr, "nexus deploy: %v\n", err)
		return exitError
	}
	defer reg.Close()
	before, _ := reg.Status(ctx)
	keysChanged := true
	if keys != nil {
		if live, err := reg.Load(ctx); err == nil {
			keysChanged = !bytes.Equal(live.Access().Source(), keys.Source())
		}
	}
	changes, err := reg.Publish(ctx, registry.Publication{Flows: flows, Access: keys})
	if err != nil {
		fmt.Fprintf(stderr, "nexus deploy: nothing published: %v\n", err)
		return exitError
	}
	for _, c := range changes {
		fmt.Fprintln(stdout, c)
	}
	if keys != nil {
		action := "published"
		if !keysChanged {
			action = "unchanged"
		}
		fmt.Fprintf(stdout, "%s access keys of %s (%d key%s)\n", action, keysFrom, keys.Len(), plural(keys.Len()))
	}
	// a registry a server fills from git: what this published serves
	// until that server's next commit, or its next start (whose first
	// round publishes the head again), replaces it (unless it changed
	// nothing: the generation moves with every change)
	if st, err := reg.Status(ctx); err == nil && st.Commit != "" && st.Generation != before.Generation {
		fmt.Fprintf(stderr, "nexus deploy: note: this registry follows git (commit %s): the next commit a server syncs, or a server's next start, replaces what this published\n", st.Commit[:min(12, len(st.Commit))])
	}
	return exitOK
}

// noSubcommand answers the command cmd ("nexus dlq") whose subcommand,
// one of subs, is missing or unknown: a request for help prints the usage
// and its flags (exit 0), none the one line and the usage on stderr, an
// unknown one (or a flag before it) one line naming it (exit 2).
func noSubcommand(args []string, cmd, subs, usage string, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help"):
		printUsage(stdout, usage, fs)
		return exitOK
	case len(args) > 0:
		where := ""
		if strings.HasPrefix(args[0], "-") {
			where = ", before its flags"
		}
		fmt.Fprintf(stderr, "%s: unknown subcommand %q: the subcommand is %s%s\n", cmd, args[0], subs, where)
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: the subcommand is %s\n", cmd, subs)
	printUsage(stderr, usage, fs)
	return exitUsage
}

// printUsage writes a command's usage text and its flags.
func printUsage(w io.Writer, text string, fs *flag.FlagSet) {
	io.WriteString(w, text)
	// a default taken from the environment may be a secret: the usage
	// (on stderr, the host's log, at every usage error) shows it is set,
	// not what it is
	fs.VisitAll(func(f *flag.Flag) {
		for { // the usage shows a flag's own type and default
			if o, ok := f.Value.(*onceValue); ok {
				f.Value = o.Value
			} else if d, ok := f.Value.(*decimalValue); ok {
				f.Value = d.Value
			} else {
				break
			}
		}
		switch {
		case f.DefValue == "":
		case f.Name == "admin-key" || f.Name == "secret":
			f.DefValue = "(set, not shown)"
		case f.Name == "repo":
			f.DefValue = gitsync.Redact(f.DefValue)
		}
	})
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
