package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/gitsync"
)

const validateUsage = `Usage: nexus validate PATH...

Compiles every flow file among PATH (files, or folders searched recursively
for *.md) and prints every error as FILE:LINE: message. Markdown that is not
a flow file (no front matter with flowmarkdown_version) is skipped. Nothing
is published.

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
		fmt.Fprintf(stderr, "nexus validate: %v\n%s", err, validateUsage)
		return exitUsage
	}
	if len(paths) == 0 {
		fmt.Fprintf(stderr, "nexus validate: give at least one flow file or folder\n%s", validateUsage)
		return exitUsage
	}

	files, problems := markdownFiles(paths)
	srcs, readProblems := readSources(files)
	problems = append(problems, readProblems...)
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
	fmt.Fprintf(stdout, "ok: %d flow%s in %d file%s\n", len(flows), plural(len(flows)), len(files), plural(len(files)))
	return exitOK
}

// readSources reads files, within git sync's limits (a file up to
// gitsync.DefaultMaxFileBytes, all of them up to
// gitsync.DefaultMaxTotalBytes); a file that cannot be read, is not a
// regular file or is over a limit is a problem.
func readSources(files []string) ([]flow.Source, []string) {
	var srcs []flow.Source
	var problems []string
	var total int64
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

// markdownFiles expands paths: a file is taken as given, a folder is
// searched recursively for *.md (hidden folders such as .git skipped).
func markdownFiles(paths []string) (files, problems []string) {
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", p, pathError(err)))
			continue
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", path, pathError(err)))
				return nil
			}
			if d.IsDir() && path != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.EqualFold(filepath.Ext(path), ".md") {
				if !d.Type().IsRegular() {
					// as git sync refuses it: a link could take a flow
					// from outside the folder
					problems = append(problems, fmt.Sprintf("%s: a symbolic link or special file: a folder of flows holds regular files only", path))
					return nil
				}
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", p, err))
		}
	}
	slices.Sort(files)
	return slices.Compact(files), problems
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
// (what --db "$DB" gives with DB unset) or one naming a folder is refused,
// for every command that has one: it would read as an empty registry.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	positional, err := parseFlagsAndArgs(fs, args)
	if f := fs.Lookup("db"); err == nil && f != nil {
		if f.Value.String() == "" {
			return nil, errors.New("--db is empty: give the registry file (such as " + DefaultDB + ")")
		}
		// a folder (the state directory) would be read as a registry
		// with no queue beside it: "DLQ is empty"
		if p, perr := expandHome(f.Value.String()); perr == nil {
			if info, serr := os.Stat(p); serr == nil && info.IsDir() {
				return nil, fmt.Errorf("--db %s is a directory: give the registry file, such as %s", p, filepath.Join(p, "registry.db"))
			}
		}
	}
	return positional, err
}

func parseFlagsAndArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
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

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
