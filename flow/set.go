package flow

import (
	"crypto/sha256"
	"errors"
	"fmt"
)

// Source is one file of a config repo: its path (as errors should name it)
// and its bytes.
type Source struct {
	Path string
	Data []byte
}

// CompileSet compiles every flow file among srcs, skipping other Markdown,
// and checks the rule of a config repo that no two files declare one
// (tenant, flow). It returns the flows that compiled, in the order of srcs,
// and every error of every file.
func CompileSet(srcs []Source) ([]*Flow, ErrorList) {
	return compileSet(srcs, Compile)
}

// compileSet is CompileSet with each file compiled by compile.
func compileSet(srcs []Source, compile func(path string, src []byte) (*Flow, error)) ([]*Flow, ErrorList) {
	var (
		flows []*Flow
		errs  ErrorList
		seen  = map[[2]string]string{}
	)
	for _, src := range srcs {
		f, err := compile(src.Path, src.Data)
		if errors.Is(err, ErrNotFlow) {
			continue
		}
		var list ErrorList
		if errors.As(err, &list) {
			errs = append(errs, list...)
			continue
		}
		k := [2]string{f.Tenant(), f.Name()}
		if first, dup := seen[k]; dup {
			errs = append(errs, &Error{File: src.Path, Line: f.nameLine, Msg: fmt.Sprintf("flow %s/%s is also declared in %s: one file per (tenant, flow)", k[0], k[1], first)})
			continue
		}
		seen[k] = src.Path
		flows = append(flows, f)
	}
	return flows, errs
}

// CompileCache compiles sets of files as CompileSet does, and reuses the
// result of a file whose path and bytes the set before held: a commit that
// changes one flow of thousands compiles one file (a flow takes about a
// millisecond of CPU to compile, so a commit to 1,000 flows took a second
// of the two cores that serve the doors). What Compile returns depends on
// a file's path and bytes alone, and a Flow is never changed once compiled,
// so one result serves any number of sets and live sets. The cache keeps
// the results of its last set only. Its zero value is ready; it is not
// safe for concurrent use.
type CompileCache struct {
	last map[compileKey]compiled
}

// compileKey names a file by its path and the SHA-256 of its bytes (not
// the bytes: a live flow's are held by its Flow already).
type compileKey struct {
	path string
	sum  [sha256.Size]byte
}

// compiled is what Compile returned for a file.
type compiled struct {
	flow *Flow
	err  error
}

// CompileSet is CompileSet, reusing what the last call compiled.
func (c *CompileCache) CompileSet(srcs []Source) ([]*Flow, ErrorList) {
	next := make(map[compileKey]compiled, len(srcs))
	flows, errs := compileSet(srcs, func(path string, src []byte) (*Flow, error) {
		k := compileKey{path: path, sum: sha256.Sum256(src)}
		r, ok := c.last[k]
		if !ok {
			r.flow, r.err = Compile(path, src)
		}
		next[k] = r
		return r.flow, r.err
	})
	c.last = next
	return flows, errs
}
