package queue

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// linkTargets is where the planted links of a test point: a file and a
// folder outside the state directory (each with content that must not
// change), another tenant's queue holding a message, and a path that does
// not exist (which must not come to exist).
type linkTargets struct {
	outsideFile, outsideDir, otherQueue, dangling string
}

const outsideContent = "not the queue's: 0 bytes may be written here\n"

// newLinkTargets makes the targets next to a state directory root.
func newLinkTargets(t *testing.T, root string) linkTargets {
	t.Helper()
	outside := t.TempDir()
	lt := linkTargets{
		outsideFile: filepath.Join(outside, "file"),
		outsideDir:  filepath.Join(outside, "dir"),
		otherQueue:  filepath.Join(root, "globex", "orders"),
		dangling:    filepath.Join(outside, "nothing-here"),
	}
	if err := os.WriteFile(lt.outsideFile, []byte(outsideContent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(lt.outsideDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lt.outsideDir, "keep"), []byte(outsideContent), 0o644); err != nil {
		t.Fatal(err)
	}
	q, _, err := Open(root, "globex", "orders", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Append(newMessage(1, 64)); err != nil {
		t.Fatal(err)
	}
	q.Close()
	return lt
}

// snapshot is every file under the targets, with its content: what a
// link must leave exactly as it was.
func (lt linkTargets) snapshot(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, dir := range []string{filepath.Dir(lt.outsideFile), lt.otherQueue} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			files[p] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestOpenRefusesLinks: a symbolic link planted where a queue's folder or
// one of the files Open opens should be (pointing outside the state
// directory, into another tenant's queue, or to nothing) makes Open fail
// with ErrLink, naming the link, and nothing is written or created through
// it.
func TestOpenRefusesLinks(t *testing.T) {
	for _, at := range []string{"", testFlow, segmentFile, seqFile, lockFile} {
		for _, target := range []string{"outside", "other tenant", "dangling"} {
			name := "tenant folder"
			switch at {
			case testFlow:
				name = "flow folder"
			case segmentFile, seqFile, lockFile:
				name = at
			}
			t.Run(name+" to "+target, func(t *testing.T) {
				root := t.TempDir()
				lt := newLinkTargets(t, root)
				var link, to string
				switch at {
				case "":
					link = filepath.Join(root, testTenant)
				case testFlow:
					link = filepath.Join(root, testTenant, testFlow)
				default:
					link = filepath.Join(root, testTenant, testFlow, at)
				}
				isFolder := at == "" || at == testFlow
				switch target {
				case "outside":
					to = lt.outsideFile
					if isFolder {
						to = lt.outsideDir
					}
				case "other tenant":
					to = filepath.Join(lt.otherQueue, at)
					if at == "" {
						to = filepath.Dir(lt.otherQueue)
					}
				case "dangling":
					to = lt.dangling
				}
				if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(to, link); err != nil {
					t.Fatal(err)
				}
				before := lt.snapshot(t)

				q, _, err := Open(root, testTenant, testFlow, Options{})
				if err == nil {
					q.Close()
					t.Fatalf("Open succeeded through the link %s -> %s", link, to)
				}
				if !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), link+" is a symbolic link") {
					t.Errorf("Open: %v; want ErrLink naming %s", err, link)
				}
				if diff := cmp.Diff(before, lt.snapshot(t)); diff != "" {
					t.Errorf("files changed through the link (-before +after):\n%s", diff)
				}
				if _, err := os.Lstat(lt.dangling); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the dangling link's target was created: %v", err)
				}
			})
		}
	}
}

// TestQueueFilesRefuseLinks: a link planted where one of the files a queue
// opens later should be (the checkpoint, the dead letters and their marks,
// the temporary file of an atomic write) fails that operation with ErrLink
// and writes nothing through the link; the retry schedule's link is
// replaced by the new file (a rename replaces the link, not its target).
func TestQueueFilesRefuseLinks(t *testing.T) {
	for _, tc := range []struct {
		file    string
		op      func(q *Queue) error
		refused bool
	}{
		{ckptFile, func(q *Queue) error { return q.SaveCheckpoint(0) }, true},
		{dlqFile, func(q *Queue) error {
			return q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "x", Payload: []byte(`{}`)})
		}, true},
		{ackedFile, func(q *Queue) error { return q.Mark(1, 2) }, true},
		{retryFile + ".tmp", func(q *Queue) error { return q.SaveRetries([]Retry{{ID: 1, Due: epoch.Add(time.Minute)}}) }, true},
		{retryFile, func(q *Queue) error { return q.SaveRetries([]Retry{{ID: 1, Due: epoch.Add(time.Minute)}}) }, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			root := t.TempDir()
			lt := newLinkTargets(t, root)
			q, _ := openQueue(t, root, Options{})
			if _, err := q.Append(newMessage(1, 64)); err != nil {
				t.Fatal(err)
			}
			if tc.file == ackedFile {
				if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "x", Payload: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
			}
			link := filepath.Join(root, testTenant, testFlow, tc.file)
			os.Remove(link)
			if err := os.Symlink(lt.outsideFile, link); err != nil {
				t.Fatal(err)
			}
			before := lt.snapshot(t)

			err := tc.op(q)
			if tc.refused && (!errors.Is(err, ErrLink) || !strings.Contains(err.Error(), link)) {
				t.Errorf("%s through a link: %v; want ErrLink naming %s", tc.file, err, link)
			}
			if !tc.refused {
				if err != nil {
					t.Errorf("SaveRetries: %v", err)
				}
				if info, err := os.Lstat(link); err != nil || !info.Mode().IsRegular() {
					t.Errorf("%s is not a regular file after the atomic write: %v %v", tc.file, info, err)
				}
			}
			if diff := cmp.Diff(before, lt.snapshot(t)); diff != "" {
				t.Errorf("files changed through the link (-before +after):\n%s", diff)
			}
		})
	}
}

// TestWorkerLockRefusesLink: a link planted as worker.lock keeps the
// worker from delivering (it cannot take the lock), and the link's target
// is not created.
func TestWorkerLockRefusesLink(t *testing.T) {
	root := t.TempDir()
	lt := newLinkTargets(t, root)
	q, _ := openQueue(t, root, Options{})
	link := filepath.Join(root, testTenant, testFlow, workerLockFile)
	if err := os.Symlink(lt.dangling, link); err != nil {
		t.Fatal(err)
	}
	l := NewFileLock(filepath.Join(q.dir, workerLockFile))
	if ok, err := l.TryLock(); ok || err == nil {
		l.Unlock()
		t.Fatalf("the worker lock was taken through a link: %v %v", ok, err)
	}
	if _, err := os.Lstat(lt.dangling); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}
