package gitsync

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// TestLocalPackReadStall: a read of a local pack fails as stalled only
// when it got nothing for the fetch's FetchTimeout. The timer is the
// test's: it fires as the read returns with the bytes written (before the
// read stops it, as a timer that fires just as a read succeeds does), or
// while the read still waits for a writer that writes nothing. A read
// that got its bytes as the timer fired failed the fetch as silent.
func TestLocalPackReadStall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		silent bool // nothing is written; the timer fires while the read waits
	}{
		{"timer fires as the read returns", false},
		{"timer fires on a silent read", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fetchWatch{idle: time.Hour}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, pw := newLocalPack(ctx, w)
			defer r.Close()
			armed := make(chan func(), 1)
			r.afterFunc = func(_ time.Duration, f func()) func() bool {
				if tc.silent {
					armed <- f // fired by the test
					return func() bool { return true }
				}
				// fired as the read stops it: too late to stop
				return func() bool { f(); return false }
			}
			if tc.silent {
				go func() { (<-armed)() }()
				n, err := r.Read(make([]byte, 16))
				if n != 0 || !errors.Is(err, errLocalStalled) || !w.timedOut.Load() {
					t.Errorf("silent read: %d bytes, %v, timed out %v; want 0 bytes, %v, timed out", n, err, w.timedOut.Load(), errLocalStalled)
				}
				pw.CloseWithError(nil)
				return
			}
			want := "PACK and the rest of it"
			go func() {
				_, err := io.WriteString(pw, want)
				pw.CloseWithError(err)
			}()
			got, err := io.ReadAll(r)
			if string(got) != want || err != nil || w.timedOut.Load() {
				t.Errorf("read %q, %v, timed out %v; want %q, no error, not timed out", got, err, w.timedOut.Load(), want)
			}
		})
	}
}
