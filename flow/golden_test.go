package flow

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from the compiler's output")

// TestGoldenInvalid compiles every testdata/invalid/*.md and compares the
// errors with the .golden file beside it: every error, in order, as
// FILE:LINE: message.
func TestGoldenInvalid(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("testdata/invalid holds %d flows, want at least 40", len(files))
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".md"), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Compile(filepath.ToSlash(path), src)
			if err == nil {
				t.Fatalf("compiled without error: %s/%s", f.Tenant(), f.Name())
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not an ErrorList: %v", err, err)
			}
			checkGolden(t, strings.TrimSuffix(path, ".md")+".golden", err.Error()+"\n")
		})
	}
}

// TestGoldenValid compiles every testdata/valid/*.md and compares a
// description of the compiled flow with the .golden file beside it. (The
// example config repo is TestExampleRepo's.)
func TestGoldenValid(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 16 {
		t.Fatalf("testdata/valid holds %d flows, want at least 16", len(files))
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".md"), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Compile(path, src)
			if err != nil {
				t.Fatalf("does not compile:\n%v", err)
			}
			checkGolden(t, strings.TrimSuffix(path, ".md")+".golden", describeFlow(f))
		})
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./flow -run Golden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

// describeFlow writes everything the compiler decided about a flow, as
// indented JSON, so a golden file shows the compiled form.
func describeFlow(f *Flow) string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	tpl := func(t *Template) any {
		if t == nil {
			return nil
		}
		return t.String()
	}
	d := map[string]any{
		"tenant": f.Tenant(), "flow": f.Name(), "description": f.Description(),
		"retry": map[string]any{
			"max_attempts": f.Retry().MaxAttempts, "initial_delay_ms": ms(f.Retry().InitialDelay),
			"backoff_factor": f.Retry().BackoffFactor, "max_delay_ms": ms(f.Retry().MaxDelay),
		},
		"max_body_bytes": f.MaxBodyBytes(), "timeout_ms": ms(f.Timeout()),
	}
	var effects []string
	for e := range f.Effects() {
		effects = append(effects, string(e))
	}
	d["effects"] = effects
	if s := f.Schedule(); s != nil {
		d["schedule"] = map[string]any{"spec": s.Spec(), "zone": s.Location().String(), "input": string(AppendJSON(nil, s.Input()))}
	}
	if dd := f.Dedup(); dd != nil {
		d["dedup"] = map[string]any{"key": tpl(dd.Key), "absorb": dd.Absorb, "ttl_ms": ms(dd.TTL)}
	}
	step := func(s *Step) map[string]any {
		out := map[string]any{"name": s.Name(), "line": s.Line()}
		if s.Effect() != "" {
			out["effect"] = string(s.Effect())
		}
		if h := s.HTTP(); h != nil {
			var hs []string
			for _, x := range h.Headers {
				hs = append(hs, x.Name+": "+x.Value.String())
			}
			out["http"] = map[string]any{"endpoint": tpl(h.Endpoint), "method": h.Method, "headers": hs,
				"read_timeout_ms": ms(h.ReadTimeout), "connect_timeout_ms": ms(h.ConnectTimeout)}
		}
		if s.Queue() != "" {
			out["queue"] = s.Queue()
		}
		if s.SaveBody() != "" {
			out["save_body"] = s.SaveBody()
		}
		if s.When() != nil {
			out["when"] = s.When().String()
		}
		switch s.Block() {
		case BlockNTD:
			out["ntd"] = s.NTD().String()
		case BlockCondition:
			out["condition"] = s.Condition().String()
		case BlockValidate:
			var rules []string
			for _, r := range s.Rules() {
				rules = append(rules, fmt.Sprintf("%d: %s | %q | %s", r.Line, r.Expr, r.Message, r.Kind))
			}
			out["validate"] = rules
		}
		if st := s.Status(); st != nil {
			if st.Template != nil {
				out["status"] = st.Template.String()
			} else {
				out["status"] = st.Code
			}
		}
		var hs []string
		for h := range s.Headers() {
			if h.Remove {
				hs = append(hs, "remove "+h.Name)
			} else {
				hs = append(hs, h.Name+": "+h.Value)
			}
		}
		if hs != nil {
			out["response_headers"] = hs
		}
		return out
	}
	var steps, faults []any
	for _, s := range f.Steps() {
		steps = append(steps, step(s))
	}
	for _, s := range f.Faults() {
		faults = append(faults, step(s))
	}
	d["steps"], d["faults"] = steps, faults
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		panic(err)
	}
	return b.String()
}

// TestExampleRepo compiles the example config repo: every flow of the two
// documentation pages is there and must compile.
func TestExampleRepo(t *testing.T) {
	var n int
	err := filepath.WalkDir("../flows-example/flows", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := Compile(path, src); errors.Is(err, ErrNotFlow) {
			return nil
		} else if err != nil {
			t.Errorf("%v", err)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Errorf("the example repo holds %d flows, want at least 20", n)
	}
}
