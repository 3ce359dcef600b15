package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/gitsync"
)

const validateUsage = `Usage: nexus validate PATH...

Compiles every flow file among PATH (files, or folders) and prints every
error as FILE:LINE: message. A folder is read as git sync reads a commit, and
refused for what would refuse one; every file in it is checked (only .git is
left out); a config repo folder (one holding access.yaml) is its access.yaml
and flows/. Markdown that is not a flow file (no front matter with
flowmarkdown_version) is skipped, with a warning when its front matter looks
meant for a flow (a misspelt flowmarkdown_version); a file named alone that
is not a flow file is an error. Nothing is published.

Exit status: 0 when every flow compiles (it prints "ok: N flows in M files",
M counting the Markdown files read), 1 on any error, 2 on bad usage.

Example:
  nexus validate flows-example/flows
`

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	paths, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		io.WriteString(stdout, validateUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "nexus validate: %v\n", err)
		return exitUsage
	}
	if len(paths) == 0 {
		fmt.Fprintf(stderr, "nexus validate: give at least one flow file or folder\n%s", validateUsage)
		return exitUsage
	}

	srcs, accessFiles, files, problems := readPaths(paths)
	for _, a := range accessFiles {
		if !a.refused {
			_, err := access.Parse(a.path, a.data)
			problems = append(problems, gitsync.AccessProblems(err)...)
		}
	}
	warnSkipped(stderr, "validate", srcs)
	flows, errs := flow.CompileSet(srcs)
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		fmt.Fprintf(stderr, "nexus validate: %d error%s\n", len(problems), plural(len(problems)))
		return exitError
	}
	fmt.Fprintf(stdout, "ok: %d flow%s in %d file%s\n", len(flows), plural(len(flows)), files, plural(files))
	return exitOK
}

// accessFile is an access.yaml read by readPaths.
type accessFile struct {
	dir     string // the config repo holding it ("" for one named alone)
	path    string
	data    []byte
	refused bool // not read: a problem says why
}

// readPaths reads the files that PATHs name as git sync reads a commit.
// A folder is read by gitsync.DiskReader, with git sync's rules, limits
// and errors: a config repo (a folder holding access.yaml) as a commit,
// its access.yaml and flows/; any other folder as a commit's flows folder.
// A file is read as named, even without the .md extension, within the
// same limits; one named access.yaml is an access file, not Markdown.
// The sources are sorted by path, each once; files counts the files read
// (the Markdown, and access files named alone); problems refuse what was
// read.
func readPaths(paths []string) (srcs []flow.Source, accessFiles []accessFile, files int, problems []string) {
	reader := gitsync.NewDiskReader()
	var named []string
	for _, p := range paths {
		info, err := os.Stat(p)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", p, pathError(err)))
		case info.IsDir():
			before := len(reader.Problems())
			if data, repo := reader.Folder(p); repo && !slices.ContainsFunc(accessFiles, func(a accessFile) bool { return a.dir != "" && samePath(a.dir, p) }) {
				refused := len(reader.Problems()) > before && data == nil
				accessFiles = append(accessFiles, accessFile{dir: p, path: filepath.Join(p, "access.yaml"), data: data, refused: refused})
			}
			problems = append(problems, reader.Problems()[before:]...)
		default:
			named = append(named, p)
		}
	}
	srcs = reader.Sources()
	// by absolute path: the same file named flows/acme/x.md and
	// ./flows/acme/x.md, or found in a folder given too, is read once
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	read := make(map[string]bool, len(srcs))
	for _, src := range srcs {
		read[abs(src.Path)] = true
	}
	var markdown []string
	for _, p := range named {
		switch {
		case read[abs(p)]: // read already, in its folder, or named twice
		case filepath.Base(p) == "access.yaml" && slices.ContainsFunc(accessFiles, func(a accessFile) bool { return samePath(a.path, p) }):
			// a config repo's, given too, or named twice
		case filepath.Base(p) == "access.yaml":
			data, err := readSource(p)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", p, pathError(err)))
				continue
			}
			read[abs(p)] = true
			files++
			accessFiles = append(accessFiles, accessFile{path: p, data: data})
		default:
			read[abs(p)] = true
			markdown = append(markdown, p)
		}
	}
	namedSrcs, readProblems := readSources(markdown, reader.MarkdownBytes())
	problems = append(problems, readProblems...)
	srcs = append(srcs, namedSrcs...)
	slices.SortStableFunc(srcs, func(a, b flow.Source) int { return strings.Compare(a.Path, b.Path) })
	srcs = slices.CompactFunc(srcs, func(a, b flow.Source) bool { return a.Path == b.Path })
	// a folder given twice (or inside another given) is read twice: its
	// problems are said once
	seen := make(map[string]bool, len(problems))
	problems = slices.DeleteFunc(problems, func(p string) bool {
		dup := seen[p]
		seen[p] = true
		return dup
	})
	return srcs, accessFiles, files + len(srcs), problems
}

// samePath reports whether a and b name the same folder or file (REPO and
// REPO/, ./REPO and its absolute path).
func samePath(a, b string) bool {
	if ia, err := os.Stat(a); err == nil {
		if ib, err := os.Stat(b); err == nil {
			return os.SameFile(ia, ib)
		}
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// warnSkipped prints a warning for each of srcs that is skipped as not a
// flow file although its front matter looks meant for one.
func warnSkipped(stderr io.Writer, cmd string, srcs []flow.Source) {
	for _, src := range srcs {
		if why := flow.SkippedAsNotFlow(src.Data); why != "" {
			fmt.Fprintf(stderr, "nexus %s: warning: %s: skipped, not a flow file: %s\n", cmd, src.Path, why)
		}
	}
}

// readSources reads files named alone, within git sync's limits (a file
// up to gitsync.DefaultMaxFileBytes, all the Markdown read, total bytes
// already, up to gitsync.DefaultMaxTotalBytes); a file that cannot be
// read, is not a regular file, is over a limit or is not a flow file (named
// alone, it was meant to be one) is a problem.
func readSources(files []string, total int64) ([]flow.Source, []string) {
	var srcs []flow.Source
	var problems []string
	slices.Sort(files)
	files = slices.Compact(files)
	for _, path := range files {
		data, err := readSource(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, pathError(err)))
			continue
		}
		if total += int64(len(data)); total > gitsync.DefaultMaxTotalBytes {
			problems = append(problems, fmt.Sprintf("%s: the files hold more than %d bytes in all, the limit of one commit", path, gitsync.DefaultMaxTotalBytes))
			break
		}
		if !flow.IsFlowFile(data) {
			why := flow.SkippedAsNotFlow(data)
			if why == "" {
				why = "it does not start with front matter holding flowmarkdown_version"
			}
			problems = append(problems, fmt.Sprintf("%s: not a flow file: %s", path, why))
			continue
		}
		srcs = append(srcs, flow.Source{Path: path, Data: data})
	}
	return srcs, problems
}

// readSource reads one regular file of at most gitsync.DefaultMaxFileBytes.
func readSource(path string) ([]byte, error) {
	// O_NONBLOCK: a named pipe opens at once (and is then refused) instead
	// of waiting for a writer
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, gitsync.DefaultMaxFileBytes+1))
	if err == nil && len(data) > gitsync.DefaultMaxFileBytes {
		err = fmt.Errorf("over the limit of %d bytes", gitsync.DefaultMaxFileBytes)
	}
	return data, err
}

// pathError drops the path from an *fs.PathError: callers print it first.
func pathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns the positional ones. An empty --db
// (what --db "$DB" gives with DB unset), one of blanks, or one naming a folder (one that
// exists, or any path ending in a slash) is refused, for every command
// that has one: it would read as an empty registry, or be made as a
// folder. The setting is named as it was given, --db or NEXUS_DB.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	positional, err := parseFlagsAndArgs(fs, args)
	if f := fs.Lookup("db"); err == nil && f != nil {
		if f.Value.String() == "" {
			return nil, errors.New("--db is empty: give the registry file (such as " + DefaultDB + ")")
		}
		setting := settingName(map[string]bool{"db": flagGiven(fs, "db")}, "db")
		if strings.TrimSpace(f.Value.String()) == "" {
			// NEXUS_DB=" ": serve and deploy made a registry of that name
			// in the working folder, the readers read it as an empty one
			return nil, fmt.Errorf("%s is blank: give the registry file (such as %s)", setting, DefaultDB)
		}
		if strings.ContainsFunc(f.Value.String(), unicode.IsControl) {
			// a trailing line break ($(cat file) keeps none, a
			// variable may) made a registry of that name
			return nil, fmt.Errorf("%s %q holds a control character: give the registry file (such as %s)", setting, f.Value.String(), DefaultDB)
		}
		// a folder (the state directory) would be read as a registry
		// with no queue beside it: "DLQ is empty"
		if p, perr := expandHome(f.Value.String()); perr == nil {
			if info, serr := os.Stat(p); serr == nil && info.IsDir() {
				return nil, fmt.Errorf("%s %s is a directory: give the registry file, such as %s", setting, p, filepath.Join(p, "registry.db"))
			}
			if strings.HasSuffix(p, string(filepath.Separator)) { // a folder to be made
				return nil, fmt.Errorf("%s %s names a directory: give the registry file, such as %s", setting, p, filepath.Join(p, "registry.db"))
			}
		}
	}
	return positional, err
}

// flagsOnce makes each flag of fs refuse a second value (bad usage). The
// flag package keeps the last, which most commands keep too (a flag of an
// alias or a wrapper script can be given again to override it); nexus dlq
// refuses it: nexus dlq discard --id 1 --id 2 discarded 2 without a word
// of the 1, and no command can bring a discarded dead letter back.
func flagsOnce(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(*onceValue); !done {
			f.Value = &onceValue{Value: f.Value, name: f.Name}
		}
	})
}

// onceValue is a flag's value that refuses a second one (flagsOnce).
type onceValue struct {
	flag.Value
	name  string
	first *string // the value given first, once given
}

func (v *onceValue) Set(s string) error {
	if v.first != nil {
		return fmt.Errorf("--%s is given twice (%q, then %q): give it once", v.name, *v.first, s)
	}
	v.first = &s
	return v.Value.Set(s)
}

// String is the value's text; the flag package also calls it on a zero
// onceValue, to tell a default from none in the usage.
func (v *onceValue) String() string {
	if v == nil || v.Value == nil {
		return ""
	}
	return v.Value.String()
}

// IsBoolFlag keeps a boolean flag one that takes no value (--dev).
func (v *onceValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get keeps what flagError reads of a flag's type.
func (v *onceValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// flagValueRE is the flag package's error for a value its flag cannot
// take: `invalid value "10" for flag -poll: parse error`, or `invalid
// boolean value "maybe" for -dev: parse error`.
var flagValueRE = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-(\S+): (.*)$`)

// flagError says err, fs.Parse's, in nexus's words: a value as nexus serve
// says a variable it cannot read (`--poll "10" is not a duration (such as
// 10s, 5m or 168h)`), a flag it does not know with where the flags are
// listed (the usage is not printed after a usage error: one line says what
// is wrong), a flag without its value. Any other error is returned as it
// is.
func flagError(fs *flag.FlagSet, err error) error {
	text := err.Error()
	// onceValue's refusal, inside the flag package's "invalid value … for
	// flag -id: " or "invalid boolean flag all: "
	if i := strings.Index(text, ": --"); i >= 0 && strings.Contains(text[i:], " is given twice (") {
		return errors.New(text[i+2:])
	}
	if name, ok := strings.CutPrefix(text, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s (nexus %s --help lists the flags)", strings.TrimPrefix(name, "-"), fs.Name())
	}
	if name, ok := strings.CutPrefix(text, "flag needs an argument: -"); ok {
		return fmt.Errorf("--%s needs a value", strings.TrimPrefix(name, "-"))
	}
	m := flagValueRE.FindStringSubmatch(text)
	if m == nil {
		return err
	}
	name, why := m[2], m[3]
	value, uerr := strconv.Unquote(`"` + m[1] + `"`) // the flag package quoted it
	if uerr != nil {
		return err
	}
	f := fs.Lookup(name)
	if f == nil {
		return err
	}
	g, ok := f.Value.(flag.Getter)
	if !ok || g.Get() == nil {
		return err
	}
	if why == "value out of range" {
		return fmt.Errorf("--%s %q is out of range", name, value)
	}
	return fmt.Errorf("--%s %q is not %s", name, value, valueWanted(reflect.TypeOf(g.Get())))
}

func parseFlagsAndArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	decimalNumbers(fs)
	if err := flagAsValue(fs, args); err != nil {
		return nil, err
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(fs, err)
		}
		rest := fs.Args()
		if parsed := len(args) - len(rest); parsed > 0 && args[parsed-1] == "--" {
			// Parse took a "--" that ended the flags: the rest is positional
			return append(positional, rest...), nil
		}
		args = rest
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// flagAsValue refuses a flag of fs given without its value and followed by
// another flag of fs (or -h, --help): the flag package took that flag as
// the value, so that nexus serve --db --dev made a registry named "--dev"
// and served it, and nexus key generate --tenant --flows a said
// `unexpected argument "a"`, naming neither flag. A value that only looks
// like a flag (-1, a lone dash, a flag fs does not have) is taken, and so
// is any value given as --flag=value. A flag that is on or off followed by
// a separate true or false (--dev false) is refused too, naming the flag.
func flagAsValue(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args)-1; i++ {
		name, ok := flagArgName(args[i])
		if !ok {
			if args[i] == "--" {
				return nil
			}
			continue
		}
		f := fs.Lookup(name)
		if f == nil || strings.Contains(args[i], "=") {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			// --dev false turned --dev on and left the word, said as an
			// unexpected argument (no command takes one that reads as
			// true or false after such a flag)
			if _, err := strconv.ParseBool(args[i+1]); err == nil {
				return fmt.Errorf("--%s takes true or false after an equals sign: write --%s=%s", name, name, args[i+1])
			}
			continue
		}
		if next, ok := flagArgName(args[i+1]); ok && (fs.Lookup(next) != nil || isHelp(next) || isHelp("-"+next)) {
			return fmt.Errorf("--%s needs a value (%s is a flag)", name, args[i+1])
		}
		i++ // its value
	}
	return nil
}

// flagArgName is the name of the flag arg spells (-name, --name or either
// with =value), or false when arg is no flag.
func flagArgName(arg string) (string, bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false
	}
	name := strings.TrimPrefix(arg[1:], "-")
	name, _, _ = strings.Cut(name, "=")
	if name == "" || name[0] == '-' {
		return "", false
	}
	return name, true
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
