package flow_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/flow/flowtest"
)

// setResult is what a compile of a set says, comparably: each flow's
// path, names, description and artifact (its source), and each error's
// text.
type setResult struct {
	Flows  []string
	Errors []string
}

func resultOf(flows []*flow.Flow, errs flow.ErrorList) setResult {
	var r setResult
	for _, f := range flows {
		r.Flows = append(r.Flows, f.Path()+" "+f.Tenant()+"/"+f.Name()+" "+f.Description()+"\n"+string(f.Artifact()))
	}
	for _, e := range errs {
		r.Errors = append(r.Errors, e.Error())
	}
	return r
}

// A CompileCache compiles every set as CompileSet does (the same flows,
// the same errors, the duplicate rule checked across reused and new
// results), and reuses the Flow of a file whose path and bytes the set
// before held: only the files changed, added or renamed are compiled.
func TestCompileCache(t *testing.T) {
	a := flowtest.Marked("acme", "a", "one")
	a2 := flowtest.Marked("acme", "a", "two")
	b := flowtest.Marked("acme", "b", "one")
	broken := []byte("---\nflowmarkdown_version: 1\ntenant: acme\n---\n")
	rounds := []struct {
		name string
		srcs []flow.Source
		// reused: the paths whose Flow is the one the round before
		// returned for that path
		reused []string
	}{
		{"first", []flow.Source{{Path: "flows/a.md", Data: a}, {Path: "flows/b.md", Data: b}, {Path: "flows/README.md", Data: []byte("# not a flow\n")}}, nil},
		{"one changed", []flow.Source{{Path: "flows/a.md", Data: a2}, {Path: "flows/b.md", Data: b}}, []string{"flows/b.md"}},
		{"a broken file added", []flow.Source{{Path: "flows/a.md", Data: a2}, {Path: "flows/b.md", Data: b}, {Path: "flows/c.md", Data: broken}}, []string{"flows/a.md", "flows/b.md"}},
		{"the same again", []flow.Source{{Path: "flows/a.md", Data: a2}, {Path: "flows/b.md", Data: b}, {Path: "flows/c.md", Data: broken}}, []string{"flows/a.md", "flows/b.md"}},
		{"a duplicate of a reused flow", []flow.Source{{Path: "flows/a.md", Data: a2}, {Path: "flows/b.md", Data: b}, {Path: "flows/z.md", Data: b}}, []string{"flows/a.md", "flows/b.md"}},
		{"renamed: compiled again under its new path", []flow.Source{{Path: "flows/a.md", Data: a2}, {Path: "flows/moved/b.md", Data: b}}, []string{"flows/a.md"}},
		{"back to a file of two rounds before", []flow.Source{{Path: "flows/a.md", Data: a}, {Path: "flows/moved/b.md", Data: b}}, []string{"flows/moved/b.md"}},
	}
	var cache flow.CompileCache
	before := map[string]*flow.Flow{}
	for _, r := range rounds {
		flows, errs := cache.CompileSet(r.srcs)
		want := resultOf(flow.CompileSet(r.srcs))
		if diff := cmp.Diff(want, resultOf(flows, errs)); diff != "" {
			t.Errorf("%s: CompileCache against CompileSet (-want +got):\n%s", r.name, diff)
		}
		var reused []string
		now := map[string]*flow.Flow{}
		for _, f := range flows {
			now[f.Path()] = f
			if before[f.Path()] == f {
				reused = append(reused, f.Path())
			}
		}
		if diff := cmp.Diff(r.reused, reused); diff != "" {
			t.Errorf("%s: the flows reused from the round before (-want +got):\n%s", r.name, diff)
		}
		before = now
	}
}
