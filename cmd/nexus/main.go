// Command nexus is the Nexus function host and its command-line tools.
//
// Run `nexus help` for the commands. This package reads flags and the
// environment, wires the others together and prints results; of its own it
// has only the log's writer (lines written out in batches).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nexushq/nexus/naming"
)

// command is one subcommand: run returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// Exit codes shared by every command.
const (
	exitOK    = 0
	exitError = 1 // the input was wrong or the work failed
	exitUsage = 2 // the command line was wrong
)

// refusalExit is the exit code of err, a refusal of the command line: 1
// for a name the name rule refuses (flow-file.md: "the CLI prints it and
// exits 1", the rule's text as every door and the compiler say it), 2 for
// any other bad usage.
func refusalExit(err error) int {
	if _, ok := errors.AsType[*naming.Error](err); ok {
		return exitError
	}
	return exitUsage
}

func commands() map[string]command {
	return map[string]command{
		"serve":    {"run the host: doors, git sync, operations endpoints", runServe},
		"validate": {"compile flow files and report every error; publishes nothing", runValidate},
		"deploy":   {"compile flow files and publish them into the registry (no git)", runDeploy},
		"status":   {"print what is deployed: commit, flows, last sync error", runStatus},
		"key":      {"generate an access key and its access.yaml entry", runKey},
		"journal":  {"print the execution history, newest first", runJournal},
		"dlq":      {"list, replay or discard dead letters", runDLQ},
		"version":  {"print which build of nexus this is", runVersion},
	}
}

// runVersion prints the build: nexus's version, its commit and the Go
// release that built it.
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		io.WriteString(stdout, "Usage: nexus version\n\nPrints which build of nexus this is: its version, its commit when the\nbuild recorded one, and the Go release that built it.\n")
		return exitOK
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "nexus version: unexpected argument %q\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(stdout, "nexus %s\n", buildVersion())
	return exitOK
}

// buildVersion says which build this is, from what go build recorded: the
// module's version ("(devel)" for a build from a checkout), the commit
// (marked "+modified" when the checkout had changes), the Go release.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown build)"
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	short := revision[:min(12, len(revision))]
	if short != "" && (v == "(devel)" || !strings.Contains(v, short)) {
		// a pseudo-version (v0.0.0-20261201043813-b4b770f3681c+dirty)
		// names the commit already
		v += " commit " + short + modified
	}
	return v + ", " + info.GoVersion
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args names. A command's output that cannot be
// written (stdout a full disk) is said in one line and the exit code is 1:
// a command that only prints (status, journal) would otherwise exit 0
// having printed nothing. nexus serve is left out: its stdout holds only
// the --dev banner, and a banner lost is no reason to fail a host that
// served (its --help checks its own output).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return runCommand(args, stdout, stderr)
	}
	out := &outputWriter{w: terminalSafe{stdout}}
	stderr = terminalSafe{stderr}
	code := runCommand(args, out, stderr)
	if out.err != nil && code == exitOK {
		fmt.Fprintf(stderr, "%s: the output could not be written (%v)\n", commandName(args), out.err)
		return exitError
	}
	return code
}

// outputWriter is a command's stdout that keeps the first error a write
// returned; the writes after it are not tried.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// terminalSafe is a command's stdout or stderr: what is written to it
// shows every character that does not print (but the newline and the tab),
// and every byte that is not UTF-8, escaped as Go writes it in a string
// (\x1b, \a, \u202e, \xff), the rest as it is. The commands echo what they
// were given (an unknown flag, a path, a --db, a file's name); an escape
// sequence in it must reach a terminal as text, not as a command to it.
// A Write is taken as whole characters (a character split between two
// writes shows as its bytes escaped): each of the commands' writes is a
// line or more.
type terminalSafe struct{ w io.Writer }

func (t terminalSafe) Write(p []byte) (int, error) {
	if !needsEscape(p) {
		return t.w.Write(p)
	}
	n := len(p)
	var b strings.Builder
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, p[0])
		case unsafeRune(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.Write(p[:size])
		}
		p = p[size:]
	}
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return n, nil
}

// needsEscape reports whether p holds a byte that is not UTF-8 or a
// character terminalSafe escapes.
func needsEscape(p []byte) bool {
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 || unsafeRune(r) {
			return true
		}
		p = p[size:]
	}
	return false
}

// unsafeRune reports whether r is to be escaped on a terminal: any
// character that does not print but the newline and the tab.
func unsafeRune(r rune) bool {
	return r != '\n' && r != '\t' && !strconv.IsPrint(r)
}

// commandName names the command args run, as its own errors name it:
// "nexus status", "nexus dlq list" ("nexus journal" for nexus help
// journal), "nexus" for the usage and --version.
func commandName(args []string) string {
	if len(args) > 1 && isHelp(args[0]) && !isHelp(args[1]) {
		args = args[1:]
	}
	if len(args) == 0 || isHelp(args[0]) || strings.HasPrefix(args[0], "-") {
		return "nexus"
	}
	name := "nexus " + args[0]
	switch {
	case args[0] == "dlq" && len(args) > 1 && (args[1] == "list" || args[1] == "replay" || args[1] == "discard"),
		args[0] == "key" && len(args) > 1 && args[1] == "generate":
		name += " " + args[1]
	}
	return name
}

func runCommand(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return exitUsage
	}
	switch {
	case args[0] == "--version" || args[0] == "-version":
		return runVersion(args[1:], stdout, stderr) // as nexus version: no argument
	case isHelp(args[0]):
		if len(args) > 2 {
			fmt.Fprintf(stderr, "nexus: help takes one command at most, not %q; run 'nexus help' for the list\n", strings.Join(args[1:], " "))
			return exitUsage
		}
		if len(args) > 1 && !isHelp(args[1]) {
			c, ok := cmds[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "nexus: unknown command %q; run 'nexus help' for the list\n", args[1])
				return exitUsage
			}
			return c.run([]string{"--help"}, stdout, stderr)
		}
		usage(stdout, cmds)
		return exitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "nexus: unknown command %q; run 'nexus help' for the list\n", args[0])
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// isHelp reports whether name is help or one of its spellings as a flag:
// nexus help help prints the general usage, as nexus help does.
func isHelp(name string) bool {
	switch name {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Nexus runs integration flows kept as Markdown files in a git repository.\n\nUsage:\n  nexus COMMAND [flags] [arguments]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun 'nexus COMMAND --help' for a command's flags.\n")
	io.WriteString(w, b.String())
}
