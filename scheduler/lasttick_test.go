package scheduler

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestSaveLastTick: the record is written whole, replaces an older one or a
// temporary file a crash left, reads back as the record saved, and leaves
// no temporary file; in a folder that does not exist it fails and makes
// nothing. (That it is fsynced cannot be seen without a power cut.)
func TestSaveLastTick(t *testing.T) {
	t0 := time.Date(2026, 8, 9, 14, 3, 0, 0, time.UTC)
	rec := lastRecord{at: t0, from: 42, cid: "5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10"}
	const line = "1786284180000000000            \n42 5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10\n"
	cases := []struct {
		name    string
		files   map[string]string // in {dir}/acme before the save
		noDir   bool              // {dir}/acme does not exist
		wantErr bool
		want    map[string]string // in {dir}/acme after
	}{{
		name: "first record",
		want: map[string]string{"nightly.last": line},
	}, {
		name:  "replaces the previous record",
		files: map[string]string{"nightly.last": "1786284120000000000 41 c\n"},
		want:  map[string]string{"nightly.last": line},
	}, {
		name:  "replaces an older version's record",
		files: map[string]string{"nightly.last": "1786284120000000000\n"},
		want:  map[string]string{"nightly.last": line},
	}, {
		name:  "over a temporary file left by a crash",
		files: map[string]string{"nightly.last": "1786284120000000000\n", "nightly.last.tmp": "17862841"},
		want:  map[string]string{"nightly.last": line},
	}, {
		name:    "no folder",
		noDir:   true,
		wantErr: true,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			folder := filepath.Join(dir, "acme")
			if !c.noDir {
				if err := os.Mkdir(folder, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, content := range c.files {
				if err := os.WriteFile(filepath.Join(folder, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := New(Config{Dir: dir})
			e := &entry{tenant: "acme", flow: "nightly"}
			err := s.saveLastTick(e, rec)
			if (err != nil) != c.wantErr {
				t.Fatalf("saveLastTick: %v, want an error: %v", err, c.wantErr)
			}
			got := map[string]string{}
			ents, _ := os.ReadDir(folder)
			for _, de := range ents {
				b, err := os.ReadFile(filepath.Join(folder, de.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got[de.Name()] = string(b)
			}
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("files after the save (-want +got):\n%s", diff)
			}
			if !c.wantErr {
				got, err := readLastRecord(s.lastPath(e))
				if err != nil || !got.at.Equal(rec.at) || got.from != rec.from || got.cid != rec.cid {
					t.Errorf("readLastRecord = %+v, %v; want %+v", got, err, rec)
				}
				// an earlier version read the first 32 bytes, trimmed, as
				// the time: it still finds it (a rolling upgrade, a
				// rollback)
				b, _ := os.ReadFile(s.lastPath(e))
				if n, err := strconv.ParseInt(strings.TrimSpace(string(b[:min(32, len(b))])), 10, 64); err != nil || n != t0.UnixNano() {
					t.Errorf("an earlier version reads the time as %d, %v; want %d", n, err, t0.UnixNano())
				}
			}
		})
	}
}

// TestReadLastRecord: a record reads back whole; an older version's record
// (the time alone), or one whose id is missing or not a number, is its
// time without the tick's id, which resume then leaves alone; anything
// else is no record.
func TestReadLastRecord(t *testing.T) {
	t0 := time.Unix(0, 1786284180000000000)
	cases := []struct {
		content string
		want    lastRecord
	}{
		{"1786284180000000000            \n42 abc\n", lastRecord{at: t0, from: 42, cid: "abc"}},
		{"1786284180000000000 42 abc\n", lastRecord{at: t0, from: 42, cid: "abc"}},
		{"1786284180000000000\n", lastRecord{at: t0}},
		{"1786284180000000000 abc\n", lastRecord{at: t0}},
		{"1786284180000000000 x abc\n", lastRecord{at: t0}},
		{"1786284180000000000 0 abc\n", lastRecord{at: t0}},
		{"", lastRecord{}},
		{"garbage 42 abc\n", lastRecord{}},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "f.last")
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readLastRecord(path)
		if err != nil {
			t.Fatalf("%q: %v", c.content, err)
		}
		if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(lastRecord{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", c.content, diff)
		}
	}
}

// TestSaveLastTickWritesOnlyACorrelationIDThatReadsBack: the record's
// correlation ID is written only when it reads back as itself: no space
// of any kind (the reader splits on Unicode spaces) and at most 128
// bytes (the reader reads 192). A vertical tab before it was written and
// read back as another ID ("\v0" as "0"), and a long one cut short; resume
// then looked for another message. Without it the record is the time
// alone, which resume leaves alone. (The server's IDs are UUIDs.)
func TestSaveLastTickWritesOnlyACorrelationIDThatReadsBack(t *testing.T) {
	t0 := time.Date(2026, 8, 9, 14, 3, 0, 0, time.UTC)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "acme"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Dir: dir})
	e := &entry{tenant: "acme", flow: "nightly"}
	for _, c := range []struct {
		cid  string
		kept bool
	}{
		{"5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10", true},
		{strings.Repeat("c", 128), true},
		{strings.Repeat("c", 129), false},
		{strings.Repeat("c", 180), false},
		{"\v0", false},
		{"a\u00a0b", false},
		{"a\u2028b", false},
		{"a b", false},
	} {
		rec := lastRecord{at: t0, from: 42, cid: c.cid}
		if err := s.saveLastTick(e, rec); err != nil {
			t.Fatal(err)
		}
		got, err := readLastRecord(s.lastPath(e))
		want := lastRecord{at: t0}
		if c.kept {
			want = rec
		}
		if err != nil || !got.at.Equal(want.at) || got.from != want.from || got.cid != want.cid {
			t.Errorf("cid %q: reads back as %+v, %v; want %+v", c.cid, got, err, want)
		}
	}
}
