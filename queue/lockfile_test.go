package queue

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// HeldAtPath reports whether the file now at path is flock(2)ed, trying
// the lock without waiting on a descriptor of its own, as another process
// that opens the file would (false when there is no file). The worker
// tests (package queue_test) use it too.
func HeldAtPath(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// An append.lock deleted by hand while a server runs (taken for a stale
// lock), or replaced, must not let two processes append at once: the
// handle locks the file at the path, not the one it opened at first.
func TestAppendLockFollowsTheFileAtItsPath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced", func(t *testing.T, path string) {
			if err := os.WriteFile(path+".new", nil, FileMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			q, _ := openQueue(t, root, Options{})
			path := filepath.Join(root, testTenant, testFlow, lockFile)
			tc.change(t, path)
			unlock, err := q.lockAppend()
			if err != nil {
				t.Fatalf("lockAppend: %v", err)
			}
			held := HeldAtPath(t, path)
			unlock()
			if !held {
				t.Fatalf("the handle holds the append lock, but the %s at the path is free to another process", lockFile)
			}
			if HeldAtPath(t, path) {
				t.Fatalf("the append lock is still held after its unlock")
			}
		})
	}
}

// Two handles on one queue (two processes) append at once after
// append.lock was deleted under the first: every acknowledged message
// must be in the log, each under its own id.
func TestAppendsAfterAppendLockDeletedLoseNothing(t *testing.T) {
	root := t.TempDir()
	q1, _ := openQueue(t, root, Options{})
	if err := os.Remove(filepath.Join(root, testTenant, testFlow, lockFile)); err != nil {
		t.Fatal(err)
	}
	q2, _ := openQueue(t, root, Options{})
	const n = 200
	var mu sync.Mutex
	acked := map[uint64]string{}
	var wg sync.WaitGroup
	for h, q := range []*Queue{q1, q2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				m, err := q.Append(newMessage(h*n+i, 40))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				if prev, dup := acked[m.ID]; dup {
					t.Errorf("id %d acknowledged twice (%s and %s)", m.ID, prev, m.Payload)
				}
				acked[m.ID] = string(m.Payload)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	q1.Close()
	q2.Close()
	q3, damage := openQueue(t, root, Options{})
	if len(damage) > 0 {
		t.Errorf("damage after the appends: %v", damage)
	}
	got := map[uint64]string{}
	for off := int64(0); ; {
		m, next, err := q3.Read(off)
		if err != nil {
			break
		}
		got[m.ID] = string(m.Payload)
		off = next
	}
	for id, p := range acked {
		if got[id] != p {
			t.Errorf("acknowledged message %d (%s) reads as %q", id, strings.TrimSpace(p), got[id])
		}
	}
}

// A queue whose folder was deleted while a server runs refuses the next
// append with one error that names the append lock it cannot make, said
// once.
func TestAppendAfterTheFolderIsDeleted(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	dir := filepath.Join(root, testTenant, testFlow)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	_, err := q.Append(newMessage(1, 40))
	if err == nil {
		t.Fatal("Append into a deleted folder succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, filepath.Join(dir, lockFile)) || strings.Count(msg, "taking the append lock") != 1 || strings.Contains(msg, "\n") {
		t.Errorf("error = %q, want one line naming %s once", msg, filepath.Join(dir, lockFile))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted folder was made again: %v", err)
	}
}
