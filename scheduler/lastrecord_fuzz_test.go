package scheduler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
)

// FuzzLastRecord reads arbitrary bytes as a flow's .last record, and
// saves and reads back records of arbitrary fields: reading never fails
// or panics on what a file holds, a record read is saved and read back as
// itself, and a record saved reads back as itself, or as its time alone
// (no correlation ID, which resume then leaves alone) when its
// correlation ID could not be read back.
func FuzzLastRecord(f *testing.F) {
	f.Add([]byte("1786284180000000000            \n42 5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10\n"), int64(1786284180000000000), uint64(42), "5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10")
	f.Add([]byte("1786284180000000000\n"), int64(-1), uint64(0), "c")
	f.Add([]byte("1786284180000000000            \n42 5d0c7f0e"), int64(0), uint64(1), "a b")
	f.Add([]byte("17862841"), int64(1), uint64(7), "")
	dir := f.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "acme"), 0o755); err != nil {
		f.Fatal(err)
	}
	s := New(Config{Dir: dir})
	e := &entry{tenant: "acme", flow: "nightly"}
	path := s.lastPath(e)
	same := func(a, b lastRecord) bool { return a.at.Equal(b.at) && a.from == b.from && a.cid == b.cid }
	f.Fuzz(func(t *testing.T, content []byte, at int64, from uint64, cid string) {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		read, err := readLastRecord(path)
		if err != nil {
			t.Fatalf("readLastRecord(%q): %v", content, err)
		}
		if read.from == 0 && read.cid != "" || read.from > 0 && read.cid == "" {
			t.Fatalf("readLastRecord(%q) = %+v: an id without a correlation ID or the other way", content, read)
		}
		if !read.at.IsZero() || read.from > 0 {
			if err := s.saveLastTick(e, read); err != nil {
				t.Fatal(err)
			}
			if again, err := readLastRecord(path); err != nil || !same(again, read) {
				t.Fatalf("%q reads as %+v, which saved reads back as %+v, %v", content, read, again, err)
			}
		}

		rec := lastRecord{at: time.Unix(0, at), from: from, cid: cid}
		if err := s.saveLastTick(e, rec); err != nil {
			t.Fatal(err)
		}
		got, err := readLastRecord(path)
		if err != nil || !got.at.Equal(rec.at) {
			t.Fatalf("%+v saved reads back as %+v, %v", rec, got, err)
		}
		if !same(got, rec) && (got.from != 0 || got.cid != "") {
			t.Fatalf("%+v saved reads back as %+v: another correlation ID", rec, got)
		}
		if from > 0 && len(cid) <= 128 && cid != "" && !same(got, rec) && !strings.ContainsFunc(cid, unicode.IsSpace) {
			t.Fatalf("%+v saved reads back as %+v", rec, got)
		}
	})
}
