package flow

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow/flowtest"
)

// BenchmarkCompile compiles 1,000 generated flows per iteration; ns/flow
// allocs/flow and B/flow are reported per flow.
func BenchmarkCompile(b *testing.B) {
	const n = 1000
	srcs := make([][]byte, n)
	for i := range srcs {
		srcs[i] = flowtest.Flow(i, "")
		if _, err := Compile("gen.md", srcs[i]); err != nil {
			b.Fatalf("generated flow %d does not compile:\n%v", i, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		for _, src := range srcs {
			if _, err := Compile("gen.md", src); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	flows := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/flows, "ns/flow")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/flows, "allocs/flow")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/flows, "B/flow")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFlattenXML flattens a root of many distinct child names (see
// manyNamesXML). ns/name stays flat as the names grow when a child's key is
// found through an index; a scan of the keys before it made 90,000 names
// cost seconds.
func BenchmarkFlattenXML(b *testing.B) {
	for _, n := range []int{1000, 10000, 90000} {
		data := manyNamesXML(n, nil)
		b.Run(strconv.Itoa(n)+"-names", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := FlattenXML(data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/name")
		})
	}
}

// BenchmarkScheduleNext times Schedule.Next for dense, daily and rare
// schedules, in UTC and in zones whose clocks move, from times spread
// over a year (a rare one walks up to four years of days).
func BenchmarkScheduleNext(b *testing.B) {
	cases := []struct{ spec, zone string }{
		{"* * * * *", "UTC"},
		{"* * * * *", "Europe/London"},
		{"30 1 * * *", "Australia/Lord_Howe"},
		{"15 3 * * 1-5", "America/New_York"},
		{"0 0 1 1 *", "Europe/London"},
		{"0 0 29 2 *", "UTC"},
		{"0 0 29 2 *", "Australia/Lord_Howe"},
	}
	from := make([]time.Time, 64)
	for i := range from {
		from[i] = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * 137 * time.Hour)
	}
	for _, c := range cases {
		b.Run(c.spec+" "+c.zone, func(b *testing.B) {
			s := benchSchedule(b, c.spec, c.zone)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if s.Next(from[i%len(from)]).IsZero() {
					b.Fatal("no next time")
				}
				i++
			}
		})
	}
}

// benchSchedule compiles a flow scheduled spec in zone.
func benchSchedule(b *testing.B, spec, zone string) *Schedule {
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: t\nschedule: \"" + spec + "\"\nschedule_timezone: " + zone + "\n---\n\n## Step: a\n```ntd\n{}\n```\n"
	f, err := Compile("f.md", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return f.Schedule()
}

// BenchmarkRenderLargeArray renders, under a 10 MiB limit, a template of
// five holes that hold a 10,000-element array (JSON) or an object of
// 10,000 repeated children (XML) read from a body. ns/op stays that of a
// few pointer copies when each hole counts the value in one step; a walk
// of the array at each hole cost O(n) per hole.
func BenchmarkRenderLargeArray(b *testing.B) {
	const n = 10000
	var js, xs strings.Builder
	js.WriteString("[")
	xs.WriteString("<list>")
	for i := range n {
		if i > 0 {
			js.WriteString(",")
		}
		fmt.Fprintf(&js, `{"id":%d,"name":"item %d","tags":["a","b"]}`, i, i)
		fmt.Fprintf(&xs, "<item><id>%d</id><name>item %d</name></item>", i, i)
	}
	js.WriteString("]")
	xs.WriteString("</list>")
	jsonDoc, err := ParseJSON([]byte(js.String()), 0)
	if err != nil {
		b.Fatal(err)
	}
	xmlDoc, err := FlattenXML([]byte(xs.String()))
	if err != nil {
		b.Fatal(err)
	}
	ntd, err := CompileNTD(`{"a": {{ $ }}, "b": {{ $ }}, "c": [{{ $ }}, {{ $ }}], "d": {"e": {{ $ }}}}`)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		doc  any
	}{{"json-array", jsonDoc}, {"xml-object", xmlDoc}} {
		b.Run(c.name, func(b *testing.B) {
			env := &Env{Doc: c.doc}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ntd.RenderLimit(env, 10<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
