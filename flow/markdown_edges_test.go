package flow

// Markdown and YAML as their readers read them: headings indented or
// closed with #s, anchors and aliases, numbers JSON has not.

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// mdHead is 7 lines; the first step heading of a test is on line 8.
const mdHead = "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\neffects: [http_egress]\n---\n\n"

const mdCheck = "## Step: check\n```validate\n$.x != null | \"x is required\"\n```\n"

func mdCompile(t *testing.T, src string) (*Flow, ErrorList) {
	t.Helper()
	f, err := Compile("f.md", []byte(src))
	if err == nil {
		return f, nil
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Compile: %v (want a compiled flow or an ErrorList)", err)
	}
	return nil, list
}

// TestIndentedHeadingEndsSection: a heading indented by one to three
// spaces is a heading, as Markdown reads it, and ends the step section
// (decisions.md: "Any other heading, at any level, ends the current
// section"); headings were seen at the line's start only, and a code sample
// after ` ## Notes` was a step's unknown fenced block.
func TestIndentedHeadingEndsSection(t *testing.T) {
	for _, h := range []string{" ## Notes", "   ### Notes"} {
		src := mdHead + mdCheck + "\n" + h + "\n\n```json\n{\"x\": 1}\n```\n"
		if _, errs := mdCompile(t, src); errs != nil {
			t.Errorf("heading %q: %v\nwant: it is a heading, the json sample under it is documentation", h, errs)
		}
	}
}

// TestIndentedStepHeadingIsAStep: ` ## Step: forward` is a step heading,
// as Markdown reads it; its block was taken for a second block of the step
// above, an error about a step the author had not touched.
func TestIndentedStepHeadingIsAStep(t *testing.T) {
	src := mdHead + mdCheck + "\n ## Step: forward\n```ntd\n{\"y\": 1}\n```\n"
	f, errs := mdCompile(t, src)
	if errs == nil {
		if len(f.steps) != 2 {
			t.Errorf("compiled with %d steps, want 2 (check, forward)", len(f.steps))
		}
		return
	}
	for _, e := range errs {
		if strings.Contains(e.Msg, "second fenced block") {
			t.Errorf("error %v blames step \"check\"; want the heading on line 13 read as ## Step: forward, or an error on line 13", e)
		}
	}
	if errs[0].Line != 13 {
		t.Errorf("first error on line %d, want 13 (the indented heading): %v", errs[0].Line, errs)
	}
}

// TestHeadingClosingSequenceIsNotInTheName: `## Step: check ##` names
// the step check, as Markdown reads the closing #s; the name was "check ##".
func TestHeadingClosingSequenceIsNotInTheName(t *testing.T) {
	src := mdHead + "## Step: check ##\n```validate\n$.x != null | \"x is required\"\n```\n"
	f, errs := mdCompile(t, src)
	if errs != nil {
		t.Fatal(errs)
	}
	if got := f.steps[0].name; got != "check" {
		t.Errorf("step name %q, want %q (the heading renders as \"Step: check\")", got, "check")
	}
}

// TestFrontMatterAliasAccepted: a YAML alias in the front matter
// (`queue_max_delay_ms: *d`) reads as the value its anchor names; it was
// refused as "not an alias".
func TestFrontMatterAliasAccepted(t *testing.T) {
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nqueue_initial_delay_ms: &delay 500\nqueue_max_delay_ms: *delay\n---\n\n" + mdCheck
	f, errs := mdCompile(t, src)
	if errs != nil {
		t.Fatalf("%v\nwant: compiled, queue_max_delay_ms = 500", errs)
	}
	if f.retry.MaxDelay != 500*time.Millisecond {
		t.Errorf("MaxDelay %v, want 500ms", f.retry.MaxDelay)
	}
}

// TestScheduleInputAliasAccepted: an alias inside schedule_input reads as
// the value its anchor names; the object was refused as not an object.
func TestScheduleInputAliasAccepted(t *testing.T) {
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nschedule: \"@every 1m\"\nschedule_input: {a: &x {b: 1}, c: *x}\n---\n\n" + mdCheck
	f, errs := mdCompile(t, src)
	if errs != nil {
		t.Fatalf("%v\nwant: compiled, input {\"a\":{\"b\":1},\"c\":{\"b\":1}}", errs)
	}
	if got := string(AppendJSON(nil, f.schedule.input)); got != `{"a":{"b":1},"c":{"b":1}}` {
		t.Errorf("input %s", got)
	}
}

// TestScheduleInputNonJSONNumberRefused: .inf and .nan in schedule_input
// are not JSON numbers and are refused at publication; they compiled, and
// every tick delivered null in their place.
func TestScheduleInputNonJSONNumberRefused(t *testing.T) {
	for _, v := range []string{".inf", "-.Inf", ".nan"} {
		src := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nschedule: \"@every 1m\"\nschedule_input: {limit: " + v + "}\n---\n\n" + mdCheck
		f, errs := mdCompile(t, src)
		if errs == nil {
			t.Errorf("schedule_input {limit: %s} accepted, delivered as %s; want a compile error on line 6", v, AppendJSON(nil, f.schedule.input))
			continue
		}
		if errs[0].Line != 6 {
			t.Errorf("%s: error on line %d, want 6: %v", v, errs[0].Line, errs)
		}
	}
}
