package queue

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScanReadsAhead: recovering a log (Open) reads it a window at a time,
// not with two system calls a frame.
func TestScanReadsAhead(t *testing.T) {
	mfs, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: mfs})
	for i := range 1000 {
		if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(fmt.Sprintf(`{"orderId":"A-%d"}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)
	var reads atomic.Int64
	mfs.before = func(op, name string) {
		if op == opRead && name == segPath {
			reads.Add(1)
		}
	}
	q2, damage := openQueue(t, root, Options{FS: mfs})
	if len(damage) > 0 {
		t.Fatalf("recovery found %v", damage)
	}
	size, err := q2.segmentAtPath()
	if err != nil {
		t.Fatal(err)
	}
	// a window of readAhead bytes a read, and a few more (the last frame's
	// id, the checkpoint's)
	if n, most := reads.Load(), size/readAhead+10; n > most {
		t.Errorf("recovering a log of 1,000 messages (%d bytes) read it %d times, want at most %d", size, n, most)
	}
	if c, err := ReadCounts(root, testTenant, testFlow, mfs); err != nil || c != (Counts{Total: 1000}) {
		t.Errorf("ReadCounts = %+v, %v; want 1000 messages", c, err)
	}
}

// shrinkable is a file whose contents a test can cut short between reads.
type shrinkable struct{ data []byte }

func (s *shrinkable) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(s.data).ReadAt(p, off)
}

// TestWindowReader: what windowReader reads is what the file holds, with
// the file's own result wherever the window cannot serve it.
func TestWindowReader(t *testing.T) {
	content := make([]byte, 3*readAhead)
	for i := range content {
		content[i] = byte(i * 7)
	}
	type read struct {
		off int64
		n   int
	}
	type result struct {
		N    int
		Err  string
		Data []byte
	}
	tests := []struct {
		name  string
		size  int64 // the scan's end
		reads []read
		cut   int // the file cut to this many bytes after the first read (0: not)
	}{
		{"forward, small reads", 3 * readAhead, []read{{0, 12}, {12, 40}, {52, 12}, {64, 1000}, {1064, 12}}, 0},
		{"a read across the window's end", 3 * readAhead, []read{{0, 12}, {readAhead - 6, 12}, {readAhead + 6, 12}}, 0},
		{"a read larger than half the window", 3 * readAhead, []read{{0, 12}, {12, readAhead/2 + 1}, {readAhead/2 + 13, 12}}, 0},
		{"backward", 3 * readAhead, []read{{2 * readAhead, 12}, {100, 12}, {2*readAhead + 12, 12}}, 0},
		{"up to the scan's end", 1000, []read{{0, 12}, {988, 12}, {990, 12}}, 0},
		{"the file cut short after the window", 3 * readAhead, []read{{0, 12}, {12, 12}, {readAhead + 100, 12}}, 200},
		{"the file cut short before the window", 3 * readAhead, []read{{2 * readAhead, 12}, {12, 12}, {readAhead + 100, 12}}, 200},
		{"backward, after a first read near the end", 3 * readAhead, []read{{3*readAhead - 12, 12}, {100, 40}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := &shrinkable{data: content}
			windowed := &shrinkable{data: content}
			w := &windowReader{r: windowed, size: tt.size}
			var want, got []result
			for i, r := range tt.reads {
				if i == 1 && tt.cut > 0 {
					direct.data, windowed.data = content[:tt.cut], content[:tt.cut]
				}
				for _, f := range []struct {
					r   io.ReaderAt
					out *[]result
				}{{direct, &want}, {w, &got}} {
					p := make([]byte, r.n)
					n, err := f.r.ReadAt(p, r.off)
					res := result{N: n, Data: p[:n]}
					if err != nil {
						res.Err = err.Error()
					}
					*f.out = append(*f.out, res)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("reads (-the file's +the window's):\n%s", diff)
			}
		})
	}
}
