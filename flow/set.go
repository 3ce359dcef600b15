package flow

import (
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
	var (
		flows []*Flow
		errs  ErrorList
		seen  = map[[2]string]string{}
	)
	for _, src := range srcs {
		f, err := Compile(src.Path, src.Data)
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
