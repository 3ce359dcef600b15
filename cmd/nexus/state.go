package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/nexushq/nexus/registry"
)

// DefaultDB is the registry every command uses when neither --db nor
// NEXUS_DB says otherwise.
const DefaultDB = "~/.nexus/registry.db"

// dbFlag adds --db to fs, defaulting to NEXUS_DB, else DefaultDB.
func dbFlag(fs *flag.FlagSet) *string {
	var cfg struct {
		DB string `env:"NEXUS_DB"`
	}
	_ = env.Parse(&cfg) // a plain string cannot fail to parse
	def := cfg.DB
	if def == "" {
		def = DefaultDB
	}
	return fs.String("db", def, "the registry `file`; the state directory is its folder (env NEXUS_DB)")
}

// expandHome turns a leading ~/ into the user's home folder.
func expandHome(path string) (string, error) {
	rest, ok := strings.CutPrefix(path, "~/")
	if !ok {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the home folder for %s: %w", path, err)
	}
	return filepath.Join(home, rest), nil
}

// readRegistry opens the registry at path (~ expanded) for a command that
// only reads it; when there is none (no file, or an empty one) it returns
// nil and no error, and the command reports an empty registry rather than
// create one. A file that is not an SQLite database is refused before
// anything is written to it (a mistyped --db naming some other file). It
// returns the path, expanded. A symbolic link is refused, as every command
// refuses it.
func readRegistry(ctx context.Context, path string) (*registry.Registry, string, error) {
	p, err := expandHome(path)
	if err != nil {
		return nil, "", err
	}
	// a symbolic link, dangling or not, goes on to registry.Open, which
	// refuses it: one to nothing read as no registry
	info, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, p, nil
	case err != nil:
		return nil, p, err
	case info.Mode().IsRegular() && info.Size() == 0:
		return nil, p, nil // created, never written: empty
	}
	if err := registry.CheckSQLite(p); err != nil {
		return nil, p, err
	}
	reg, err := registry.Open(ctx, p, registry.Options{ReadOnly: true})
	return reg, p, err
}

// openRegistry opens the registry at path (~ expanded).
func openRegistry(ctx context.Context, path string) (*registry.Registry, error) {
	p, err := expandHome(path)
	if err != nil {
		return nil, err
	}
	return registry.Open(ctx, p, registry.Options{})
}
