package flow

import (
	"strings"
	"testing"
)

// TestScheduleInputJSONForms: schedule_input is the JSON document a tick
// delivers, so a number YAML reads that JSON does not write (0x10, 0o17,
// 0b11, 1_000, +5, .5, 1.) and a YAML tag (!!str 5, !!int 5, a custom
// !foo), on a value, a key or the whole input, are compile errors naming
// the line of the value; they compiled as the number YAML reads (0x10 as
// 16) and as the value without its tag (!!str 5 as "5", !foo x as "x").
func TestScheduleInputJSONForms(t *testing.T) {
	const obj = "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: "
	for _, c := range []struct {
		input string
		line  int
		want  string
	}{
		{"{a: 0x10}", 6, "the number 0x10 is not written as JSON writes numbers: write 16"},
		{"{a: 0o17}", 6, "the number 0o17 is not written as JSON writes numbers: write 15"},
		{"{a: 0b11}", 6, "the number 0b11 is not written as JSON writes numbers: write 3"},
		{"{a: [1_000]}", 6, "the number 1_000 is not written as JSON writes numbers: write 1000"},
		{"{a: +5}", 6, "the number +5 is not written as JSON writes numbers: write 5"},
		{"{a: .5}", 6, "the number .5 is not written as JSON writes numbers: write 0.5"},
		{"{a: -1.}", 6, "the number -1. is not written as JSON writes numbers: write -1"},
		{"{a: .inf}", 6, ".inf is not a JSON number"},
		{"{a: .NaN}", 6, ".NaN is not a JSON number"},
		{"{a: !!str 5}", 6, "the YAML tag !!str is not JSON: write the value without it (a string in quotes)"},
		{"{a: !!int 5}", 6, "the YAML tag !!int is not JSON: write the value without it (a string in quotes)"},
		{"{a: !foo x}", 6, "the YAML tag !foo is not JSON: write the value without it (a string in quotes)"},
		{"{a: !<!foo> x}", 6, "the YAML tag !foo is not JSON: write the value without it (a string in quotes)"},
		{"{a: !!binary aGk=}", 6, "the YAML tag !!binary is not JSON: write the value without it (a string in quotes)"},
		{"{!!str 1: x}", 6, "the YAML tag !!str is not JSON: write the value without it (a string in quotes)"},
		{"{a: !!seq [1]}", 6, "the YAML tag !!seq is not JSON: write the value without it (a string in quotes)"},
		{"!foo {a: 1}", 6, "the YAML tag !foo is not JSON: write the value without it (a string in quotes)"},
		{"!!str '{\"a\": 1}'", 6, "the YAML tag !!str is not JSON: write the value without it (a string in quotes)"},
		// written over lines, the error names the value's line
		{"\n  job: nightly\n  limits:\n    max: 0x10", 9, "the number 0x10 is not written as JSON writes numbers: write 16"},
		{"\n  job: !!str nightly", 7, "the YAML tag !!str is not JSON: write the value without it (a string in quotes)"},
		{"\n  job: nightly\n  zip: 017", 8, "the number 017 has a leading zero, which YAML reads as octal: write it without"},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != c.line || errs[0].Msg != obj+c.want {
			t.Errorf("%s: errors %v, want one on line %d: %q", c.input, errs, c.line, obj+c.want)
		}
	}
	for input, want := range map[string]string{
		"{a: 16, b: -0.5, c: 1e3, d: 1.5E-2, e: 0, f: \"0x10\", g: '!!str 5'}": `{"a":16,"b":-0.5,"c":1000,"d":0.015,"e":0,"f":"0x10","g":"!!str 5"}`,
		"'{\"a\": 1}'":                           `{"a":1}`,
		"{a: 2026-01-01, b: yes, c: ~, d: true}": `{"a":"2026-01-01","b":"yes","c":null,"d":true}`,
	} {
		checkTickDocument(t, input, want)
	}
}

// TestScheduleInputPastFloat: a number of schedule_input past float64's
// range written plainly (1e400), which YAML reads as a string, is refused
// as out of range, as a body's is (decisions.md: "in a body and in
// schedule_input alike"); it compiled as the string "1e400". Quoted, it
// is a string.
func TestScheduleInputPastFloat(t *testing.T) {
	const obj = "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: "
	for _, c := range []struct {
		input string
		line  int
		want  string
	}{
		{"{a: 1e400}", 6, "number 1e400 is out of range"},
		{"{a: [-1e400]}", 6, "number -1e400 is out of range"},
		{"\n  a: 1\n  b: 2.5E+999", 8, "number 2.5E+999 is out of range"},
		{"{a: .5e400}", 6, "the number .5e400 is not a JSON number"},
		{"\n  a: 1\n  b: 1e-1000000000", 8, "number 1e-1000000000 is out of range"},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != c.line || errs[0].Msg != obj+c.want {
			t.Errorf("%s: errors %v, want one on line %d: %q", c.input, errs, c.line, obj+c.want)
		}
	}
	checkTickDocument(t, "{a: \"1e400\", b: 1e300}", `{"a":"1e400","b":1e+300}`)
}

// TestScheduleInputPast64Bits: a hex, octal or binary number of
// schedule_input past 64 bits (0x1ffffffffffffffff, -0x8000000000000001,
// with a sign or underscores), which YAML reads as a string, is refused as
// the same form within 64 bits is, naming the number to write, or as out
// of range past what a body's number holds; it compiled as the string
// "0x1ffffffffffffffff". Quoted, it is a string.
func TestScheduleInputPast64Bits(t *testing.T) {
	const obj = "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: "
	past := "0x1" + strings.Repeat("f", 256) // 2^1025 − 1, past float64's range
	for _, c := range []struct {
		input string
		line  int
		want  string
	}{
		{"{a: 0x1ffffffffffffffff}", 6, "the number 0x1ffffffffffffffff is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: 0x10000000000000000}", 6, "the number 0x10000000000000000 is not written as JSON writes numbers: write 18446744073709551616"},
		{"{a: [-0x1ffffffffffffffff]}", 6, "the number -0x1ffffffffffffffff is not written as JSON writes numbers: write -36893488147419103231"},
		{"{a: -0x8000000000000001}", 6, "the number -0x8000000000000001 is not written as JSON writes numbers: write -9223372036854775809"},
		{"{a: +0x1ffffffffffffffff}", 6, "the number +0x1ffffffffffffffff is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: 0X1FFFFFFFFFFFFFFFF}", 6, "the number 0X1FFFFFFFFFFFFFFFF is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: 0x1_ffff_ffff_ffff_ffff}", 6, "the number 0x1_ffff_ffff_ffff_ffff is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: 0o3777777777777777777777}", 6, "the number 0o3777777777777777777777 is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: -0o3777777777777777777777}", 6, "the number -0o3777777777777777777777 is not written as JSON writes numbers: write -36893488147419103231"},
		{"{a: 0b1" + strings.Repeat("1", 64) + "}", 6, "the number 0b" + strings.Repeat("1", 62) + "… is not written as JSON writes numbers: write 36893488147419103231"},
		{"{a: -0b1" + strings.Repeat("0", 64) + "}", 6, "the number -0b1" + strings.Repeat("0", 60) + "… is not written as JSON writes numbers: write -18446744073709551616"},
		{"{a: 0x" + strings.Repeat("f", 40) + "}", 6, "the number 0x" + strings.Repeat("f", 40) + " is not written as JSON writes numbers: write 1461501637330902918203684832716283019655932542975"},
		{"{a: 0x" + strings.Repeat("f", 80) + "}", 6, "the number 0x" + strings.Repeat("f", 62) + "… is not written as JSON writes numbers: write 2135987035920910082395021706169552114602704522356652769947041607…"},
		{"{a: " + past + "}", 6, "number 0x1" + strings.Repeat("f", 61) + "… is out of range"},
		{"\n  a: 1\n  b: -0x1ffffffffffffffff", 8, "the number -0x1ffffffffffffffff is not written as JSON writes numbers: write -36893488147419103231"},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != c.line || errs[0].Msg != obj+c.want {
			t.Errorf("%s: errors %v, want one on line %d: %q", c.input, errs, c.line, obj+c.want)
		}
	}
	checkTickDocument(t, "{a: \"0x1ffffffffffffffff\", b: 0x1g, c: 0x, d: _0x1ffffffffffffffff}",
		`{"a":"0x1ffffffffffffffff","b":"0x1g","c":"0x","d":"_0x1ffffffffffffffff"}`)
}
