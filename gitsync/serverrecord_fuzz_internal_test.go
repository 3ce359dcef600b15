package gitsync

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// FuzzServerRecord reads arbitrary bytes as a running server's lock file
// (servers/*.lock, which another server reads to find the replicas that
// superseded it): no panic, and a record the server writes reads back as
// written when it is within the 4 KiB the reader reads.
func FuzzServerRecord(f *testing.F) {
	rec, _ := json.Marshal(serverRecord{Source: "https://git.example/acme/flows.git (branch main, folder flows)", Started: time.Date(2026, 8, 9, 14, 2, 11, 5, time.UTC)})
	f.Add(rec, "https://git.example/acme/flows.git (branch main, folder flows)", int64(1786284131000000005))
	f.Add(rec[:len(rec)/2], "", int64(0))
	f.Add([]byte(`{"source":1}`), "\xff", int64(-1))
	f.Add([]byte(`null`), "a", int64(1<<62))
	path := filepath.Join(f.TempDir(), "s.lock")
	f.Fuzz(func(t *testing.T, content []byte, source string, started int64) {
		// held by another open file, as by a running server
		write := func(b []byte) {
			t.Helper()
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		holder, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		write(content)
		readRunningServer(path)

		want := serverRecord{Source: source, Started: time.Unix(0, started).UTC()}
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4<<10 {
			return // past what readRunningServer reads: a source of kilobytes
		}
		write(b)
		got, ok := readRunningServer(path)
		want.Source = string([]rune(source)) // JSON reads a byte that is not UTF-8 as U+FFFD
		if !ok || got.Source != want.Source || !got.Started.Equal(want.Started) {
			t.Fatalf("%s reads back as %+v, %v", b, got, ok)
		}
	})
}
