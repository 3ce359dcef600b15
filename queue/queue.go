package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nexushq/nexus/naming"
)

// File names of a queue folder.
const (
	segmentFile = "segment.log"
	ckptFile    = "segment.log.ckpt"
	retryFile   = "segment.log.retry"
	seqFile     = "segment.log.seq"
	dlqFile     = "dlq.log"
	ackedFile   = "dlq.log.acked"
	lockFile    = "append.lock"
	// workerLockFile is flock(2)ed by the process whose worker delivers
	// the queue
	workerLockFile = "worker.lock"
)

// Options configure Open. Zero fields take the defaults.
type Options struct {
	// FS is the file system; nil means OS.
	FS FS
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// GatherWait is the longest a batch's leader waits for as many
	// appends as its previous batch held before it writes (see Append);
	// 0 means DefaultGatherWait, a negative value never waits.
	GatherWait time.Duration
	// OnCommit, when set, is called after each group commit that made
	// appends durable, with how many messages it held and how long its
	// fdatasync took. It runs on the appending goroutine, before any of
	// the batch's appends return, and must be quick.
	OnCommit func(messages int, sync time.Duration)
	// OnDamage, when set, is called with the damage the queue finds and
	// repairs while it is open (Open returns what it finds itself): an
	// id counter that no longer verifies at an append or a drain, which
	// is rebuilt past the ids issued. It runs under the append lock, and
	// must be quick and not use the queue.
	OnDamage func(Damage)
	// LockWait is the longest an append, Open, and a replay or mark of a
	// dead letter wait for the append lock, held by another process (or
	// another goroutine of this one), before they fail with ErrLockBusy
	// having written nothing; 0 means DefaultLockWait, a negative value
	// waits for as long as it takes. The worker's uses of the lock (its
	// reads past the synced end, dead-lettering, housekeeping, taking the
	// log over once elected) wait as long too, then look again later, so
	// that its Stop does not wait as long as another process's pause.
	LockWait time.Duration
}

// DefaultLockWait is the default Options.LockWait: far longer than any
// append holds the lock (a write and an fdatasync), so that only a process
// paused or stuck while holding it (SIGSTOP, a debugger, a frozen
// container, a disk that stopped answering) makes a caller give up.
const DefaultLockWait = 5 * time.Second

// ErrLockBusy is wrapped by the error of an append, Open, replay or mark
// that waited Options.LockWait for the append lock in vain: nothing was
// written, and the queue takes the next append as before.
var ErrLockBusy = errors.New("another process has held the append lock too long (paused or stuck while holding it)")

// DefaultGatherWait is the default Options.GatherWait.
const DefaultGatherWait = time.Millisecond

// Queue is one (tenant, flow) queue's files, open. Its methods are safe for
// concurrent use; appends from several processes are serialised by the
// append lock.
type Queue struct {
	Tenant, Flow string
	dir          string
	fs           FS
	now          func() time.Time
	// segp is the open segment.log, replaced (under the append lock)
	// when the janitor deleted the file; readers outside the append lock
	// hold segMu for reading while they use it, and a replaced file is
	// closed once they are done (see replaceSegment)
	segp  atomic.Pointer[segFile]
	segMu sync.RWMutex
	seq   File // segment.log.seq, rewritten in place; replaced under the append lock
	// issued is the highest next id this handle read from the counter or
	// wrote to it; guarded by the append lock
	issued uint64
	lock   *os.File // append.lock, flock(2)ed while appending
	// the identities of seq and lock as opened, and the paths they are
	// checked against at each batch (seqAtPath, flockAppend); guarded by
	// the append lock
	seqInfo, lockInfo fs.FileInfo
	seqPath, lockPath string
	// segPath and ackedPath are the paths an idle worker stats to tell
	// whether Drain and CompactDLQ have anything to do, joined once
	segPath, ackedPath string
	appendMu           appendMutex  // the append lock within this process (flock is per process)
	durable            atomic.Int64 // the end of segment.log known to be synced

	batchBuf []byte // the frames of a batch, reused by the leader

	// tails are the files appendDurable last appended to, as it left
	// them; guarded by the append lock
	tails map[string]fileTail

	gatherWait time.Duration
	lockWait   time.Duration // Options.LockWait resolved
	gatherTime *time.Timer   // the leader's, for the gathering wait
	onCommit   func(messages int, sync time.Duration)
	onDamage   func(Damage)

	mu        sync.Mutex // guards the fields below
	pending   []*appendReq
	bound     int // how many of pending are AppendContext's (their bound set)
	leading   bool
	poisoned  error
	lastBatch int           // how many appends the previous batch held
	gathered  chan struct{} // closed when pending reaches gatherFor
	gatherFor int
}

// ErrTooLarge is wrapped by the error of an append whose message a frame
// cannot hold: it never will, so it is no failure to retry.
var ErrTooLarge = errors.New("the message is too large for a frame")

// MaxPayload is the largest payload a message may have for sure: a frame
// holds MaxRecord bytes, of which the source, the correlation ID and the
// record's fields take at most 1,300.
const MaxPayload = MaxRecord - 1300

// ErrPoisoned is wrapped by every append after a failed write or fdatasync:
// the queue must be reopened (and its log verified) before it takes more.
var ErrPoisoned = errors.New("the queue's log failed a write or an fdatasync and must be reopened")

// Dir returns the folder of a queue: {root}/{tenant}/{flow}, after both
// names pass the name rule.
func Dir(root, tenant, flow string) (string, error) {
	if err := naming.Check(tenant, naming.Tenant(flow)); err != nil {
		return "", err
	}
	if err := naming.Check(flow, naming.Flow(tenant)); err != nil {
		return "", err
	}
	return filepath.Join(root, tenant, flow), nil
}

// Open opens the queue tenant/flow under root, creating its folder and
// files when needed (only after both names pass the name rule). It recovers
// segment.log under the append lock: a torn tail is truncated, damaged
// frames are reported and skipped from then on. The damage found is
// returned beside the queue.
func Open(root, tenant, flow string, opts Options) (*Queue, []Damage, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return nil, nil, err
	}
	if opts.FS == nil {
		opts.FS = OS{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.GatherWait == 0 {
		opts.GatherWait = DefaultGatherWait
	}
	if opts.LockWait == 0 {
		opts.LockWait = DefaultLockWait
	}
	q := &Queue{Tenant: tenant, Flow: flow, dir: dir, fs: opts.FS, now: opts.Now, gatherWait: opts.GatherWait, lockWait: opts.LockWait, onCommit: opts.OnCommit,
		onDamage: opts.OnDamage,
		appendMu: make(appendMutex, 1), seqPath: filepath.Join(dir, seqFile), lockPath: filepath.Join(dir, lockFile),
		segPath: filepath.Join(dir, segmentFile), ackedPath: filepath.Join(dir, ackedFile)}
	if err := MakeDir(q.fs, root, tenant, flow); err != nil {
		return nil, nil, fmt.Errorf("queue %s/%s: %w", tenant, flow, err)
	}
	if q.lock, err = openNoFollow(q.lockPath, os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		return nil, nil, fmt.Errorf("queue %s/%s: the append lock: %w", tenant, flow, err)
	}
	if q.lockInfo, err = q.lock.Stat(); err != nil {
		q.lock.Close()
		return nil, nil, fmt.Errorf("queue %s/%s: the append lock: %w", tenant, flow, err)
	}
	seg, err := q.fs.OpenFile(q.segPath, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		q.lock.Close()
		return nil, nil, fmt.Errorf("queue %s/%s: %w", tenant, flow, err)
	}
	segInfo, err := seg.Stat()
	if err != nil {
		seg.Close()
		q.lock.Close()
		return nil, nil, fmt.Errorf("queue %s/%s: checking %s: %w", tenant, flow, segmentFile, err)
	}
	q.segp.Store(&segFile{seg, segInfo})
	if q.seq, err = q.fs.OpenFile(q.seqPath, os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		seg.Close()
		q.lock.Close()
		return nil, nil, fmt.Errorf("queue %s/%s: %w", tenant, flow, err)
	}
	if q.seqInfo, err = q.seq.Stat(); err != nil {
		q.closeFiles()
		return nil, nil, fmt.Errorf("queue %s/%s: checking %s: %w", tenant, flow, seqFile, err)
	}
	// the folders and files just made must survive a power cut
	for _, d := range []string{dir, filepath.Dir(dir), root} {
		if err := q.fs.SyncDir(d); err != nil {
			q.closeFiles()
			return nil, nil, fmt.Errorf("queue %s/%s: syncing %s: %w", tenant, flow, d, err)
		}
	}
	damage, err := q.recover()
	if err != nil {
		q.closeFiles()
		return nil, nil, fmt.Errorf("queue %s/%s: recovering %s: %w", tenant, flow, segmentFile, err)
	}
	return q, damage, nil
}

// segmentAtPath makes sure the segment.log this handle has open is the file
// at its path, and returns that file's size. The janitor deletes an idle
// queue's files (in this process or another) while other handles may be
// open, and another process may create segment.log again afterwards: a
// handle that went on writing to the file it had open would acknowledge
// messages into a file no reader opens. So when the path is gone, or names
// another file, the handle opens the file at the path (creating it if need
// be). The caller holds the append lock.
func (q *Queue) segmentAtPath() (int64, error) {
	atPath, err := q.fs.Stat(q.segPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	open, err2 := q.seg().Stat()
	if err2 != nil {
		return 0, err2
	}
	if err == nil && sameFile(atPath, open) {
		return open.Size(), nil
	}
	seg, err := q.fs.OpenFile(q.segPath, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return 0, err
	}
	info, err := seg.Stat()
	if err == nil {
		err = q.fs.SyncDir(q.dir)
	}
	if err != nil {
		seg.Close()
		return 0, err
	}
	q.replaceSegment(seg, info)
	q.durable.Store(0)
	return info.Size(), nil
}

// emptyAtPath reports, without the append lock, whether segment.log at its
// path is the file this handle has open (see segmentAtPath), and empty:
// one stat, against the identity read when the file was opened. False
// when the stat fails.
func (q *Queue) emptyAtPath() bool {
	atPath, err := q.fs.Stat(q.segPath)
	return err == nil && atPath.Size() == 0 && sameFile(q.segp.Load().info, atPath)
}

// segFile holds the open segment.log (an interface value cannot be swapped
// atomically), and its identity, read when it was opened.
type segFile struct {
	f    File
	info fs.FileInfo
}

// seg is the open segment.log. Outside the append lock, hold segMu for
// reading while using it.
func (q *Queue) seg() File { return q.segp.Load().f }

// replaceSegment makes seg the open segment.log, under the append lock.
// The file it replaces is closed once no reader uses it: at once when none
// does, otherwise in a goroutine that waits for them (the caller may be one
// of them: readableEnd).
func (q *Queue) replaceSegment(seg File, info fs.FileInfo) {
	old := q.seg()
	q.segp.Store(&segFile{seg, info})
	if q.segMu.TryLock() {
		old.Close()
		q.segMu.Unlock()
		return
	}
	go func() {
		q.segMu.Lock()
		defer q.segMu.Unlock()
		old.Close()
	}()
}

// useSegmentAtPath makes this handle read and append the segment.log at the
// path, under the append lock. A worker calls it once elected: the janitor
// deletes files only when no worker holds the queue, so the file cannot be
// replaced while it works, but it may have been while it stood by.
func (q *Queue) useSegmentAtPath() error {
	unlock, err := q.lockAppendBounded()
	if err != nil {
		return err
	}
	defer unlock()
	_, err = q.durableEndAtPath()
	return err
}

// durableEndAtPath is, under the append lock, the end of the segment.log at
// the path, all of it durable (every appender syncs before it unlocks); the
// handle takes that file and that end.
func (q *Queue) durableEndAtPath() (int64, error) {
	size, err := q.segmentAtPath()
	if err != nil {
		return 0, err
	}
	q.durable.Store(size)
	return size, nil
}

// sameFile reports whether two descriptions are of one file: os.SameFile
// for the OS, and for another FS the identity its FileInfo.Sys gives.
func sameFile(a, b fs.FileInfo) bool {
	if os.SameFile(a, b) {
		return true
	}
	sa, sb := a.Sys(), b.Sys()
	if _, isOS := sa.(*syscall.Stat_t); isOS || sa == nil {
		return false
	}
	return sa == sb
}

func (q *Queue) closeFiles() error {
	return errors.Join(q.seg().Close(), q.seq.Close(), q.lock.Close())
}

func (q *Queue) path(name string) string { return filepath.Join(q.dir, name) }

// lockAppend takes the queue's append lock: the mutex between goroutines
// of this process, then flock(2) between processes, for as long as it
// takes. It returns the unlock.
func (q *Queue) lockAppend() (func(), error) {
	q.appendMu.Lock()
	if err := q.flockAppend(); err != nil {
		return nil, err
	}
	return q.unlockAppend, nil
}

func (q *Queue) unlockAppend() {
	flockRetry(q.lock, syscall.LOCK_UN)
	q.appendMu.Unlock()
}

// lockAppendBounded is lockAppend for a caller that answers someone (a
// door's append, Open, an operator's replay or mark): it waits at most
// q.lockWait for both locks together, then fails wrapping ErrLockBusy
// having taken neither. A process paused while it holds the lock keeps it
// for as long as the pause lasts, and the caller is better told so than
// kept waiting. Uncontended, it costs what lockAppend does: a TryLock and
// one flock(2) (non-blocking); the clock is read only on contention.
func (q *Queue) lockAppendBounded() (func(), error) { return q.lockAppendUntil(nil) }

// lockAppendUntil is lockAppendBounded giving up, having taken neither
// lock, when done closes too (a caller's context: an AppendContext that
// leads its batch); the error then wraps errGaveUp. A wait for flock(2)
// given up goes on in the background as one given up at LockWait does.
// With done nil it is lockAppendBounded, at its cost.
func (q *Queue) lockAppendUntil(done <-chan struct{}) (func(), error) {
	if q.lockWait < 0 && done == nil {
		return q.lockAppend()
	}
	var deadline time.Time
	if !q.appendMu.TryLock() {
		// another goroutine of this process (a worker's drain, a replay,
		// a wait given up that goes on in the background) holds it,
		// perhaps waiting for another process
		deadline = q.deadline()
		if err := q.appendMu.lockBefore(deadline, done); err != nil {
			if err == errGaveUp {
				return nil, fmt.Errorf("taking the append lock %s: %w", q.lockPath, err)
			}
			return nil, fmt.Errorf("taking the append lock %s: waited %v for this process's own use of it: %w", q.lockPath, q.lockWait, err)
		}
	}
	if err := q.flockAppendUntil(&deadline, done); err != nil {
		return nil, err
	}
	return q.unlockAppend, nil
}

// deadline is the end of a bounded wait for the append lock starting now:
// LockWait away, or never (the zero time) when LockWait is negative.
func (q *Queue) deadline() time.Time {
	if q.lockWait < 0 {
		return time.Time{}
	}
	return time.Now().Add(q.lockWait)
}

// errGaveUp is wrapped by the error of a wait for the append lock that
// its caller's context ended (see lockAppendUntil).
var errGaveUp = errors.New("the wait for the append lock was given up")

// appendMutex is the append lock between the goroutines of a process: a
// mutex that a bounded wait can give up on (lockBefore), and that wakes
// such a wait when it is let go, as sync.Mutex wakes a Lock. It is one
// slot, full while held.
type appendMutex chan struct{}

// Lock takes the mutex, waiting as long as it takes. A queue that Open did
// not make (Peek's, for reading) has none, and must not append.
func (m appendMutex) Lock() {
	if m == nil {
		panic("queue: the append lock of a queue that was not opened")
	}
	m <- struct{}{}
}

// TryLock takes the mutex if no one holds it, and reports whether it did.
func (m appendMutex) TryLock() bool {
	select {
	case m <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock lets the mutex go; the holder need not be the goroutine that
// took it (a wait left behind lets go its caller's).
func (m appendMutex) Unlock() {
	select {
	case <-m:
	default:
		panic("queue: unlock of an append mutex not held")
	}
}

// lockBefore takes the mutex, waiting until deadline at most (for ever
// when it is zero), or until done closes (nil: never). It fails wrapping
// ErrLockBusy at the deadline, errGaveUp when done closed.
func (m appendMutex) lockBefore(deadline time.Time, done <-chan struct{}) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case m <- struct{}{}:
		return nil
	case <-expired:
		return ErrLockBusy
	case <-done:
		return errGaveUp
	}
}

// waitLeft is flockWithin's error when its wait for flock(2) goes on in
// the background: appendMu is then that wait's, which lets it go once the
// lock it gets in the end is let go too. Its cause is ErrLockBusy (the
// deadline passed) or errGaveUp (the caller's context ended).
type waitLeft struct {
	wait  time.Duration
	cause error
}

func (e waitLeft) Error() string {
	if e.cause != ErrLockBusy {
		return e.cause.Error()
	}
	return "waited " + e.wait.String() + ": " + ErrLockBusy.Error()
}
func (e waitLeft) Unwrap() error { return e.cause }

// flockAppend flock(2)s append.lock, the file at its path: when the file
// this handle opened is no longer there (deleted by hand as a stale lock,
// replaced, or its folder deleted and made again by another process), the
// lock on it would exclude no one, so the handle lets it go and locks the
// file at the path, creating it if need be. The caller holds appendMu;
// when it fails, appendMu is let go (or, when the error is a waitLeft,
// handed to the wait left behind, which lets it go when it ends).
func (q *Queue) flockAppend() error { return q.flockAppendWithin(nil) }

// flockAppendWithin is flockAppend waiting until *deadline (set from
// q.lockWait when zero) for the lock, or without limit when deadline is
// nil.
func (q *Queue) flockAppendWithin(deadline *time.Time) error {
	return q.flockAppendUntil(deadline, nil)
}

// flockAppendUntil is flockAppendWithin giving up when done closes too
// (see lockAppendUntil); deadline must then not be nil, and a zero
// *deadline with a negative LockWait waits until done closes.
func (q *Queue) flockAppendUntil(deadline *time.Time, done <-chan struct{}) error {
	err := q.flockAppendAtPath(deadline, done)
	if err != nil && !errors.As(err, new(waitLeft)) {
		q.appendMu.Unlock()
	}
	return err
}

// flockAppendAtPath is flockAppendWithin without letting appendMu go.
func (q *Queue) flockAppendAtPath(deadline *time.Time, done <-chan struct{}) error {
	path := q.lockPath
	for {
		var err error
		if deadline != nil {
			err = q.flockWithin(deadline, done)
		} else {
			err = flockRetry(q.lock, syscall.LOCK_EX)
		}
		if err != nil {
			return fmt.Errorf("taking the append lock %s: %w", path, err)
		}
		atPath, err := os.Lstat(path)
		if err == nil && os.SameFile(q.lockInfo, atPath) {
			return nil
		}
		flockRetry(q.lock, syscall.LOCK_UN)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("taking the append lock: %w", err)
		}
		f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE, FileMode)
		if err != nil {
			return fmt.Errorf("taking the append lock: %w", err)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("taking the append lock %s: %w", path, err)
		}
		q.lock.Close()
		q.lock, q.lockInfo = f, info
	}
}

// flockWithin takes flock(2) on q.lock, waiting until *deadline (set from
// q.lockWait when zero) when another holds it (see flockFdWithin). When
// the deadline passes first, appendMu, which the caller holds, is handed
// over to the wait going on in the background (the error is a waitLeft,
// which wraps ErrLockBusy): until it ends no goroutine of this process
// uses the lock, and a bounded caller waits for appendMu, as long as
// LockWait at most.
func (q *Queue) flockWithin(deadline *time.Time, done <-chan struct{}) error {
	return flockFdWithin(int(q.lock.Fd()), syscall.LOCK_EX, q.lockWait, deadline, q.appendMu, done)
}

// flockFdWithin takes flock(2) how (LOCK_EX or LOCK_SH) on fd, waiting
// until *deadline (set from wait when zero) when another holds it.
// Uncontended it is one non-blocking flock(2), and the clock is not read.
// The wait is a blocking flock(2), so that the kernel wakes it when the
// lock is let go, as it wakes any waiter; it runs on a duplicate of the
// descriptor (the same open file, so the same lock) in a goroutine. When
// the deadline passes first, that goroutine is left to finish: it lets go
// the lock it gets in the end, closes the duplicate, unlocks left (when
// not nil: the mutex the caller holds, handed over), and the
// error is a waitLeft (ErrLockBusy). The caller may close fd meanwhile.
// While a wait left behind on the same file goes on, a wait starts no
// other but waits for that one's end, then tries again, and fails
// wrapping ErrLockBusy, leaving nothing behind (left is not unlocked), if
// the deadline passes first: waits given up one after the other (a queue
// opened again at each request while the holder is paused) would each
// keep a descriptor and a thread blocked in flock(2) until the lock is
// let go. When done (nil: never) closes first, the wait is given up as at
// the deadline, its error wrapping errGaveUp; with done set, a negative
// wait has no deadline.
func flockFdWithin(fd, how int, wait time.Duration, deadline *time.Time, left sync.Locker, done <-chan struct{}) error {
	err := flockFd(fd, how|syscall.LOCK_NB)
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return err
	}
	if deadline.IsZero() && wait >= 0 {
		*deadline = time.Now().Add(wait)
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(*deadline))
		defer timer.Stop()
		expired = timer.C
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	id := lockFileID{uint64(st.Dev), st.Ino}
	for {
		ended, ok := leftWaits.Load(id)
		if !ok {
			break
		}
		select {
		case <-ended.(chan struct{}):
		case <-expired:
			return fmt.Errorf("waited %v: %w", wait, ErrLockBusy)
		case <-done:
			return errGaveUp
		}
		err := flockFd(fd, how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return err
	}
	locked := make(chan error, 1)
	go func() { locked <- flockFd(dup, how) }()
	cause := ErrLockBusy
	select {
	case err := <-locked:
		syscall.Close(dup) // the lock stays: fd holds the same open file
		return err
	case <-expired:
	case <-done:
		cause = errGaveUp
	}
	ended := make(chan struct{})
	leftWaits.Store(id, ended)
	go func() {
		if <-locked == nil {
			flockFd(dup, syscall.LOCK_UN)
		}
		syscall.Close(dup)
		leftWaits.CompareAndDelete(id, ended)
		close(ended)
		if left != nil {
			left.Unlock()
		}
	}()
	return waitLeft{wait, cause}
}

// leftWaits holds the waits for flock(2) left behind by flockFdWithin, by
// the file they wait on: each a channel closed when it ends.
var leftWaits sync.Map // lockFileID -> chan struct{}

// lockFileID is a file's identity: its device and inode.
type lockFileID struct{ dev, ino uint64 }

func flockRetry(f *os.File, how int) error { return flockFd(int(f.Fd()), how) }

// Close closes the queue's files.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.poisoned == nil {
		q.poisoned = errors.New("the queue is closed")
	}
	return q.closeFiles()
}

// recover scans segment.log under the append lock, truncates a torn tail
// (and syncs), and brings the id counter up to the highest id in the log.
func (q *Queue) recover() ([]Damage, error) {
	unlock, err := q.lockAppendBounded()
	if err != nil {
		return nil, err
	}
	defer unlock()
	// the janitor may have deleted the file Open opened before this lock
	size, err := q.segmentAtPath()
	if err != nil {
		return nil, err
	}
	maxID, end, damage, err := scanIDs(q.seg(), size)
	if err != nil {
		return damage, err
	}
	end = nextAppend(end, size, damage) // a torn tail is cut, a damaged last frame kept
	if end < size {
		if err := q.seg().Truncate(end); err != nil {
			return damage, err
		}
		if err := q.seg().Sync(); err != nil {
			return damage, err
		}
	}
	q.durable.Store(end)
	// a drain stopped midway, or a checkpoint past the recovered end,
	// resolves to a plain checkpoint (see resolveCheckpoint); one that
	// does not verify is reported, and read as 0
	_, ckptDamage, err := q.resolveCheckpointFile(end, false)
	damage = append(damage, ckptDamage...)
	if err != nil {
		return damage, err
	}
	raw, err := readValue(q.seq)
	if err != nil {
		return damage, err
	}
	next, verified := seqValue(raw), verifiesAsSeq(raw)
	if !verified {
		// a counter missing or damaged reads as 1: after a drain the log
		// holds none of the ids issued, but the dead letters keep theirs,
		// the marks their replays', and append.lock the counter as the
		// last drain left it, none of which may be issued again
		kept, err := q.highestKeptID()
		if err != nil {
			return damage, err
		}
		maxID = max(maxID, kept)
	}
	// a counter that does not verify is written, even where it is past
	// the ids found: an append then reads a counter that verifies, and
	// scans for the ids (nextID) only when it was damaged since
	if next <= maxID || !verified {
		rebuilt := max(next, maxID+1)
		if err := q.writeSeq(rebuilt, true); err != nil {
			return damage, err
		}
		if !verified && len(raw) > 0 {
			// a new queue's counter is empty until now; one that holds
			// bytes that do not verify was damaged
			d := valueDamage(seqFile, "id counter", raw, seqMagic)
			d.Reason += fmt.Sprintf("; rebuilt as %d, past the ids of the log, the dead letters and the last drain", rebuilt)
			damage = append(damage, d)
		}
	}
	return damage, nil
}

// verifiesAsSeq reports whether b holds an id counter.
func verifiesAsSeq(b []byte) bool {
	_, ok := decodeValue(seqMagic, b)
	return ok
}

// counterCopy is the next id of the copy of the id counter that f
// (append.lock) holds (see writeCounterCopy), 0 when it holds none that
// verifies.
func counterCopy(f io.ReaderAt) (uint64, error) {
	b, err := readValue(f)
	if err != nil {
		return 0, fmt.Errorf("reading the copy of the id counter in %s: %w", lockFile, err)
	}
	v, _ := decodeValue(seqMagic, b)
	return v, nil
}

// writeCounterCopy writes next, durably, into f (append.lock) in the id
// counter's format, unless f holds a larger one: a drain and the janitor
// leave there the counter as it was when they emptied the log, which then
// holds none of the ids issued, so that a counter lost after them is
// rebuilt past those ids (recover, nextID). The caller holds the append
// lock.
func writeCounterCopy(f *os.File, next uint64) error {
	if held, err := counterCopy(f); err != nil || held >= next {
		return err
	}
	if _, err := f.WriteAt(encodeValue(seqMagic, next), 0); err != nil {
		return fmt.Errorf("writing the copy of the id counter in %s: %w", lockFile, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing the copy of the id counter in %s: %w", lockFile, err)
	}
	return nil
}

func fileSize(f File) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

var (
	seqMagic  = [4]byte{'N', 'X', 'S', '1'}
	ckptMagic = [4]byte{'N', 'X', 'C', '1'}
	// drainMagic marks segment.log.ckpt while a drain or the janitor
	// empties the log: its value is the next message id when it began.
	// Every message of the log being emptied has a smaller id, every
	// message appended after it a larger one (see resolveCheckpoint).
	drainMagic = [4]byte{'N', 'X', 'D', '1'}
	retMagic   = [4]byte{'N', 'X', 'R', '1'}
)

// encodeValue is the format of .seq and .ckpt: magic, value, CRC.
func encodeValue(magic [4]byte, v uint64) []byte {
	b := append(magic[:], binary.BigEndian.AppendUint64(nil, v)...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeValue(magic [4]byte, b []byte) (uint64, bool) {
	if len(b) != 16 || [4]byte(b[:4]) != magic || crc32.Checksum(b[:12], castagnoli) != binary.BigEndian.Uint32(b[12:]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[4:12]), true
}

// scanIDs scans the first size bytes of a segment.log: the highest message
// id in it, the end of its last good frame, and the damage found. Each
// frame's CRC is checked through a small buffer (scanHeads): a message of
// 64 MiB is read, not held.
func scanIDs(seg File, size int64) (maxID uint64, end int64, damage []Damage, err error) {
	end, err = scanHeads(seg, segmentFile, 0, size, func(head []byte, _, _ int64) error {
		if len(head) >= 9 && head[0] == kindMessage {
			maxID = max(maxID, binary.BigEndian.Uint64(head[1:9]))
		}
		return nil
	}, func(d Damage) { damage = append(damage, d) })
	return maxID, end, damage, err
}

// highestKeptID is the highest message id the dead letters and their
// marks (a replay's new message) hold, or the copy of the counter in
// append.lock had issued, for a counter that was lost.
func (q *Queue) highestKeptID() (uint64, error) {
	var top uint64
	if q.lock != nil {
		next, err := counterCopy(q.lock)
		if err != nil {
			return 0, err
		}
		top = max(next, 1) - 1
	}
	// the ids only: each frame's CRC checked through a small buffer
	// (eachHeadDamage), a dead letter of 64 MiB read, not held; a mark is
	// a few bytes, so a frame longer than its head is none
	for _, name := range []string{dlqFile, ackedFile} {
		if err := q.eachHeadDamage(name, func(head []byte, length int64) error {
			switch {
			case len(head) >= 9 && head[0] == kindDeadLetter:
				top = max(top, binary.BigEndian.Uint64(head[1:9]))
			case length == int64(len(head)) && len(head) > 0 && head[0] == kindMark:
				if m, err := decodeMark(head); err == nil {
					top = max(top, m.id, m.replayID)
				}
			}
			return nil
		}, func(Damage) {}); err != nil {
			return 0, err
		}
	}
	return top, nil
}

// readSeq reads the next id; a missing or unreadable counter is 1 (recovery
// raises it past the ids in the log).
func (q *Queue) readSeq() (uint64, error) {
	next, _, err := q.readSeqVerified()
	return next, err
}

// readSeqVerified is readSeq, and whether the counter verified.
func (q *Queue) readSeqVerified() (next uint64, verified bool, err error) {
	b, err := readValue(q.seq)
	if err != nil {
		return 0, false, err
	}
	return seqValue(b), verifiesAsSeq(b), nil
}

// seqValue is the next id an id counter's bytes hold: 1 when they do not
// verify (recovery raises it past the ids in the log).
func seqValue(b []byte) uint64 {
	if v, ok := decodeValue(seqMagic, b); ok && v > 0 {
		return v
	}
	return 1
}

// nextID is, under the append lock, the next id to issue, segment.log
// holding size bytes. The counter is the file at the path (deleted or
// replaced by hand, it is opened again, as segmentAtPath does for the log),
// and never goes back: it is at least what this handle last read or wrote,
// and a counter that does not verify (emptied, overwritten) is raised past
// the ids of the log, of the dead letters and of their marks' replays, as
// recovery raises it, and reported (Options.OnDamage) as Open reports
// it. A counter read as 1 issued again the ids of the messages in the
// log. A counter that verifies costs a stat and a 16-byte pread, as
// before: the report is made only where the rebuild was.
func (q *Queue) nextID(size int64) (uint64, error) {
	if err := q.seqAtPath(); err != nil {
		return 0, err
	}
	raw, err := readValue(q.seq)
	if err != nil {
		return 0, err
	}
	next := seqValue(raw)
	if verifiesAsSeq(raw) {
		next = max(next, q.issued)
		q.issued = next
		return next, nil
	}
	maxID, _, _, err := scanIDs(q.seg(), size)
	if err != nil {
		return 0, err
	}
	kept, err := q.highestKeptID()
	if err != nil {
		return 0, err
	}
	next = max(next, maxID+1, kept+1, q.issued)
	q.issued = next
	// Open made the counter verify (writing it when it did not): one
	// that no longer does, empty or missing too, was damaged since
	if q.onDamage != nil {
		d := valueDamage(seqFile, "id counter", raw, seqMagic)
		if len(raw) == 0 {
			d.Reason = "empty or missing"
		}
		d.Reason += fmt.Sprintf("; found while the queue was open, rebuilt as %d, past the ids of the log, the dead letters, the last drain and this process's appends", next)
		q.onDamage(d)
	}
	return next, nil
}

// seqAtPath makes sure the id counter this handle has open is
// segment.log.seq at its path, opening (or creating) that one if not. The
// caller holds the append lock.
func (q *Queue) seqAtPath() error {
	atPath, err := q.fs.Stat(q.seqPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", seqFile, err)
	}
	if err == nil && sameFile(atPath, q.seqInfo) {
		return nil
	}
	seq, err := q.fs.OpenFile(q.seqPath, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	info, err := seq.Stat()
	if err != nil {
		seq.Close()
		return fmt.Errorf("checking %s: %w", seqFile, err)
	}
	if err := q.fs.SyncDir(q.dir); err != nil {
		seq.Close()
		return fmt.Errorf("syncing the folder of %s: %w", seqFile, err)
	}
	q.seq.Close()
	q.seq, q.seqInfo = seq, info
	return nil
}

// writeSeq rewrites the id counter in place (16 bytes, one sector), synced
// when durable is set. Recovery takes the larger of it and the highest id
// of the log, so between drains it need not be synced.
func (q *Queue) writeSeq(next uint64, durable bool) error {
	q.issued = max(q.issued, next)
	if _, err := q.seq.WriteAt(encodeValue(seqMagic, next), 0); err != nil {
		return fmt.Errorf("writing %s: %w", seqFile, err)
	}
	if durable {
		if err := q.seq.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", seqFile, err)
		}
	}
	return nil
}

// NewMessage is what Append takes: the message without its id and offset.
type NewMessage struct {
	Source        string
	CorrelationID string
	Payload       []byte
}

type appendReq struct {
	m   NewMessage
	at  time.Time
	res Message
	err error
	// wake receives true when the caller is to lead the next batch, false
	// when its batch is written (res and err are set). It has room for
	// one value: a caller is woken at most once to lead and once as done,
	// and after leading it no longer reads it.
	wake chan bool
	// bound is AppendContext's, nil for Append (whose request keeps its
	// size: a door's append allocates no more)
	bound *boundReq
}

// boundReq is what an AppendContext's request has more than an Append's.
// It is gone (its caller returns the context's error, and it is neither
// written nor woken) once done closed before its batch's leader took the
// append lock and claimed it (taken). gone and taken are guarded by q.mu.
type boundReq struct {
	done        <-chan struct{} // the context's Done
	gone, taken bool
}

// done is the Done of req's context, nil for Append's.
func (req *appendReq) done() <-chan struct{} {
	if req.bound == nil {
		return nil
	}
	return req.bound.done
}

// gone reports whether req was given up (see boundReq); the caller holds
// q.mu.
func (req *appendReq) gone() bool { return req.bound != nil && req.bound.gone }

// Append writes m at the end of the log and returns it with its id and
// offset, once its frame is durable: concurrent appends are batched into
// one write at the tail and one fdatasync (group commit), and each caller
// learns its id only after its batch's fdatasync returned. The first caller
// to find no batch in progress leads the next one; before it takes the
// batch it may gather (see gather). A failed write or fdatasync poisons
// the queue (ErrPoisoned) until it is reopened.
func (q *Queue) Append(m NewMessage) (Message, error) {
	if err := q.checkSize(m); err != nil {
		return Message{}, err
	}
	return q.append(&appendReq{m: m, at: q.now(), wake: make(chan bool, 1)})
}

// AppendContext is Append for a caller with a deadline of its own (a
// queue_publish step, under its execution's ceiling): while it waits for
// its batch to be written, for the append lock (held by another process,
// or by another goroutine of this one) or behind the batch before it, it
// gives up when ctx ends, having written nothing, and its error wraps
// context.Cause(ctx). Once its batch's leader holds the append lock and
// writes it, it is not given up: it returns after the fdatasync, as Append
// does, though ctx ended meanwhile. A batch it leads and gives up is led
// on by the next of its appends, which wait no longer than they would
// have.
func (q *Queue) AppendContext(ctx context.Context, m NewMessage) (Message, error) {
	done := ctx.Done()
	if done == nil {
		return q.Append(m)
	}
	if err := q.checkSize(m); err != nil {
		return Message{}, err
	}
	if ctx.Err() != nil {
		return Message{}, q.gaveUp(ctx)
	}
	msg, err := q.append(&appendReq{m: m, at: q.now(), wake: make(chan bool, 1), bound: &boundReq{done: done}})
	if errors.Is(err, errGaveUp) {
		return Message{}, q.gaveUp(ctx)
	}
	return msg, err
}

// gaveUp is the error of an AppendContext that gave up.
func (q *Queue) gaveUp(ctx context.Context) error {
	return fmt.Errorf("queue %s/%s: nothing was appended: %w", q.Tenant, q.Flow, context.Cause(ctx))
}

// append is Append's and AppendContext's group commit of req.
func (q *Queue) append(req *appendReq) (Message, error) {
	q.mu.Lock()
	if q.poisoned != nil {
		err := q.poisoned
		q.mu.Unlock()
		return Message{}, fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
	}
	q.pending = append(q.pending, req)
	if req.bound != nil {
		q.bound++
	}
	if q.gathered != nil && len(q.pending) >= q.gatherFor {
		close(q.gathered)
		q.gathered = nil
	}
	if q.leading {
		q.mu.Unlock()
		var lead bool
		if req.bound == nil {
			lead = <-req.wake
		} else {
			select {
			case lead = <-req.wake:
			case <-req.bound.done:
				if q.withdraw(req) {
					return Message{}, errGaveUp
				}
				lead = <-req.wake // its batch is being written
			}
		}
		if !lead {
			return req.res, req.err
		}
		// the previous leader handed over
		q.mu.Lock()
	}
	q.leading = true
	q.gather()
	batch, bound := q.pending, q.bound
	q.pending, q.bound, q.lastBatch = nil, 0, len(batch)
	poisoned := q.poisoned
	q.mu.Unlock()

	var err error
	if poisoned != nil {
		if bound > 0 {
			batch = q.claim(batch)
		}
		for _, r := range batch {
			r.err = fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, poisoned)
			r.wake <- false
		}
	} else {
		err = q.writeBatch(req, batch, bound)
	}

	q.mu.Lock()
	if err != nil && q.poisoned == nil {
		q.poisoned = fmt.Errorf("%w: %w", err, ErrPoisoned)
	}
	q.handOver()
	q.mu.Unlock()
	return req.res, req.err
}

// handOver hands the lead to the first pending append, or ends it when
// there is none; the caller holds q.mu and leads no more.
func (q *Queue) handOver() {
	if len(q.pending) > 0 {
		q.pending[0].wake <- true // the next batch is its
	} else {
		q.leading = false
	}
}

// withdraw gives up AppendContext's req, whose done closed while it
// waited, unless its batch's leader claimed it (it is being written); it
// reports whether it did. A req still pending leaves the queue (the lead
// handed to it, if it was, passed on); one in a batch is left out of it
// by the leader (claim).
func (q *Queue) withdraw(req *appendReq) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if req.bound.taken {
		return false
	}
	req.bound.gone = true
	if i := slices.Index(q.pending, req); i >= 0 {
		q.pending = slices.Delete(q.pending, i, i+1)
		q.bound--
		select {
		case <-req.wake: // the lead was handed to it: passed on
			q.handOver()
		default:
		}
	}
	return true
}

// claim is what the leader writes (or fails) of a batch holding
// AppendContext's appends, once it holds the append lock (or failed to
// take it): the batch without the appends given up or whose done closed,
// the rest marked taken (no longer given up). A leader of its own left
// out finds errGaveUp as its error. (A batch of Append's alone is written
// whole, unclaimed.)
func (q *Queue) claim(batch []*appendReq) []*appendReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := batch[:0]
	for _, r := range batch {
		if b := r.bound; b != nil {
			if !b.gone {
				select {
				case <-b.done:
					b.gone = true
					r.err = errGaveUp // read by the leader, woken by no one
				default:
				}
			}
			if b.gone {
				continue
			}
			b.taken = true
		}
		kept = append(kept, r)
	}
	return kept
}

// requeue puts a batch whose leader gave up (its done closed while it
// waited for the append lock) back at the head of the pending appends,
// without the leader and the appends given up, to be led by the first.
func (q *Queue) requeue(leader *appendReq, batch []*appendReq) {
	q.mu.Lock()
	defer q.mu.Unlock()
	leader.bound.gone = true
	var back []*appendReq
	for _, r := range batch {
		if !r.gone() {
			back = append(back, r)
			if r.bound != nil {
				q.bound++
			}
		}
	}
	q.pending = append(back, q.pending...)
	q.lastBatch = min(q.lastBatch, len(q.pending)) // gathered already: the next leader does not wait again
}

// checkSize refuses a message too large for a frame.
func (q *Queue) checkSize(m NewMessage) error {
	// MaxPayload, not what this record alone would fit: the message must
	// fit its dead letter too, with its last error
	if len(m.Source) > 255 || len(m.CorrelationID) > maxCorrelationID || len(m.Payload) > MaxPayload {
		return fmt.Errorf("queue %s/%s: %w (at most %d bytes)", q.Tenant, q.Flow, ErrTooLarge, MaxPayload)
	}
	return nil
}

// gather is the leader's wait before it takes its batch, with q.mu held
// (released while waiting): when fewer appends are pending than the
// previous batch held, it waits up to gatherWait for as many. Under load
// batches stay large, so that one fdatasync (the costly part of an append)
// serves more messages; a lone caller never waits (its previous batch was
// itself), and a load that drops costs one wait, after which the batch
// size follows it.
func (q *Queue) gather() {
	if q.gatherWait < 0 || len(q.pending) >= q.lastBatch {
		return
	}
	gathered := make(chan struct{})
	q.gathered, q.gatherFor = gathered, q.lastBatch
	q.mu.Unlock()
	if q.gatherTime == nil {
		q.gatherTime = time.NewTimer(q.gatherWait)
	} else {
		q.gatherTime.Reset(q.gatherWait)
	}
	select {
	case <-gathered:
		q.gatherTime.Stop()
	case <-q.gatherTime.C:
	}
	q.mu.Lock()
	q.gathered = nil
}

// writeBatch writes a batch under the append lock: the tail and the id
// counter are read under it (another process may have appended), the
// frames written with one write and made durable with one fdatasync, then
// the counter moved on. An append lock not had within the queue's
// LockWait fails the batch (ErrLockBusy) and leaves the queue unpoisoned:
// nothing was written. A leader of AppendContext's gives the lock up when
// its context ends (requeue); bound is how many of the batch are
// AppendContext's, which claim leaves out once given up.
func (q *Queue) writeBatch(leader *appendReq, batch []*appendReq, bound int) (err error) {
	unlock, err := q.lockAppendUntil(leader.done())
	if err != nil {
		if errors.Is(err, errGaveUp) {
			// the leader's own context ended: the rest of the batch
			// waits for the lock behind the next leader
			q.requeue(leader, batch)
			leader.err = errGaveUp
			return nil
		}
		// nothing was written: the batch fails, the queue is as it was
		if bound > 0 {
			batch = q.claim(batch)
		}
		for _, r := range batch {
			r.err = fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
			r.wake <- false
		}
		return nil
	}
	if bound > 0 {
		if batch = q.claim(batch); len(batch) == 0 {
			unlock()
			return nil
		}
	}
	defer func() {
		for _, r := range batch {
			if err != nil {
				r.err = fmt.Errorf("queue %s/%s: %w: %w", q.Tenant, q.Flow, err, ErrPoisoned)
			}
			r.wake <- false
		}
	}()
	defer unlock()
	return q.writeFrames(batch)
}

// writeFrames writes a batch's frames at the tail and makes them durable;
// the caller holds the append lock.
func (q *Queue) writeFrames(batch []*appendReq) error {
	tail, err := q.segmentAtPath()
	if err != nil {
		return err
	}
	next, err := q.nextID(tail)
	if err != nil {
		return err
	}
	buf := q.batchBuf[:0]
	for _, r := range batch {
		r.res = Message{ID: next, Offset: tail + int64(len(buf)), EnqueuedAt: r.at.UTC(),
			Source: r.m.Source, CorrelationID: r.m.CorrelationID, Payload: r.m.Payload}
		next++
		var at int
		buf, at = openFrame(buf)
		buf = closeFrame(appendMessageRecord(buf, &r.res), at)
	}
	if cap(buf) <= maxKeptBatchBuf {
		q.batchBuf = buf
	}
	// The counter moves first, rewritten in place without fsync (recovery
	// takes the highest id of the log, durable before any is acknowledged):
	// if the write or the fdatasync below fails, frames may stay in the log,
	// but no process issues their ids again.
	if err := q.writeSeq(next, false); err != nil {
		return err
	}
	if _, err := q.seg().WriteAt(buf, tail); err != nil {
		q.seg().Truncate(tail) // best effort: recovery finds a torn tail anyway
		return fmt.Errorf("writing %s: %w", segmentFile, err)
	}
	syncStart := time.Now()
	if err := q.seg().Sync(); err != nil {
		// frames not durable must not be read (their callers get a 503):
		// cut them (best effort), or a reader could deliver what a power
		// cut then takes away, and the next message would take its offset
		q.seg().Truncate(tail)
		return fmt.Errorf("syncing %s: %w", segmentFile, err)
	}
	if q.onCommit != nil {
		q.onCommit(len(batch), time.Since(syncStart))
	}
	q.advanceDurable(tail + int64(len(buf)))
	return nil
}

// appendLocked appends one message, durably, for a caller that holds the
// append lock (Replay), outside the group commit: the commit's leader
// waits for the lock meanwhile. A failed write poisons the queue as a
// failed batch does.
func (q *Queue) appendLocked(m NewMessage) (Message, error) {
	if err := q.checkSize(m); err != nil {
		return Message{}, err
	}
	q.mu.Lock()
	poisoned := q.poisoned
	q.mu.Unlock()
	if poisoned != nil {
		return Message{}, fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, poisoned)
	}
	req := &appendReq{m: m, at: q.now()}
	if err := q.writeLocked([]*appendReq{req}); err != nil {
		return Message{}, err
	}
	return req.res, nil
}

// writeLocked writes batch (its messages checked) in one durable write,
// as appendLocked writes one; a failure poisons the queue. The caller
// holds the append lock.
func (q *Queue) writeLocked(batch []*appendReq) error {
	if err := q.writeFrames(batch); err != nil {
		err = fmt.Errorf("%w: %w", err, ErrPoisoned)
		q.mu.Lock()
		if q.poisoned == nil {
			q.poisoned = err
		}
		q.mu.Unlock()
		return fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
	}
	return nil
}

// maxKeptBatchBuf bounds the batch buffer a queue keeps between batches.
const maxKeptBatchBuf = 1 << 20

// advanceDurable moves the synced end of the log forward (never back).
func (q *Queue) advanceDurable(end int64) {
	for {
		cur := q.durable.Load()
		if end <= cur || q.durable.CompareAndSwap(cur, end) {
			return
		}
	}
}

// readableEnd is the end of the log up to which frames are durable: a
// frame being written, or written but not yet synced, is not delivered.
// Frames beyond the known synced end were appended by another process
// (which syncs before it releases the append lock), or by a drain: the
// end is read again under the lock. The caller holds segMu for reading.
func (q *Queue) readableEnd() (int64, error) {
	// the synced end before the size: read after it, an append that ended
	// in between made the size look short of it, a drain's, and the synced
	// end was moved back below the message just acknowledged (its wake-up
	// then lost until the next poll when the append lock was busy)
	d := q.durable.Load()
	size, err := fileSize(q.seg())
	if err != nil {
		return 0, err
	}
	if size <= d {
		if size < d {
			q.durable.CompareAndSwap(d, size) // emptied by a drain
		}
		return size, nil
	}
	if !q.appendMu.TryLock() {
		// a batch of this process is being written or synced: what lies
		// past the synced end is not durable yet
		return q.durable.Load(), nil
	}
	var deadline *time.Time
	if q.lockWait >= 0 {
		deadline = new(time.Time)
	}
	if err := q.flockAppendWithin(deadline); err != nil {
		if errors.Is(err, ErrLockBusy) {
			// another process holds the lock too long (paused while it
			// appends): what lies past the synced end is not known to
			// be durable, and the worker looks again at its next poll
			// rather than wait as long as the pause (its Stop with it)
			return q.durable.Load(), nil
		}
		return 0, err
	}
	defer q.appendMu.Unlock()
	defer flockRetry(q.lock, syscall.LOCK_UN)
	return q.durableEndAtPath()
}

// Read returns the first message at or after offset, and the offset after
// it. It skips frames that do not verify; at the end of the log it returns
// io.EOF (a frame still being written by another process reads as the end).
func (q *Queue) Read(offset int64) (Message, int64, error) {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	return q.read(offset)
}

// read is Read for a caller that holds segMu for reading.
func (q *Queue) read(offset int64) (Message, int64, error) {
	size, err := q.readableEnd()
	if err != nil {
		return Message{}, offset, err
	}
	for offset < size {
		rec, n, _, err := frameAt(q.seg(), offset, size)
		if err != nil {
			return Message{}, offset, err
		}
		if n == 0 {
			next, err := nextFrame(q.seg(), offset, size)
			if err != nil {
				return Message{}, offset, err
			}
			if next < 0 {
				// a tail that does not verify: a torn write, which
				// recovery will cut, is waited at; damage, which
				// recovery keeps, is passed (EOF past it), so that the
				// checkpoint passes it and the log drains
				whole := int64(-1)
				if rec != nil {
					whole = int64(len(rec))
				}
				if torn, err := tailTorn(q.seg(), offset, size, whole); err == nil && !torn {
					return Message{}, size, io.EOF
				}
				return Message{}, offset, io.EOF
			}
			offset = next
			continue
		}
		m, err := decodeMessage(rec, offset)
		if err != nil {
			offset += n // a frame that verifies but holds no message
			continue
		}
		return m, offset + n, nil
	}
	return Message{}, offset, io.EOF
}

// Size is the current length of segment.log in bytes.
func (q *Queue) Size() (int64, error) {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	return fileSize(q.seg())
}

// Checkpoint returns the offset up to which everything is processed (see
// resolveCheckpoint for a drain stopped midway).
func (q *Queue) Checkpoint() (int64, error) {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	b, err := readValueFile(q.fs, q.path(ckptFile))
	if err != nil {
		return 0, err
	}
	size, err := fileSize(q.seg())
	if err != nil {
		return 0, err
	}
	return resolveCheckpoint(b, q.seg(), size)
}

// ownCheckpoint is Checkpoint for the queue's worker as it starts: what
// the file holds is written back as a plain checkpoint when it is not one
// (see resolveCheckpointFile), and a file that did not verify is reported.
func (q *Queue) ownCheckpoint() (int64, []Damage, error) {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	size, err := fileSize(q.seg())
	if err != nil {
		return 0, nil, err
	}
	return q.resolveCheckpointFile(size, true)
}

// SaveCheckpoint records, durably, that everything before offset is
// processed: the value is rewritten in place and fsynced.
func (q *Queue) SaveCheckpoint(offset int64) error {
	return q.saveCheckpointRecord(ckptMagic, uint64(offset))
}

// resolveCheckpointFile reads segment.log.ckpt, resolves what it holds
// against a log that ends at end (see resolveCheckpoint) and, when that is
// not a plain checkpoint holding the same value, writes the value back,
// fsynced. It returns the value.
//
// The worker owns the file: it rewrites it in place without the append
// lock, so a caller that is not the queue's worker (owner false: Open, in
// any process) may read its write half done (as 0), or a drain marker it
// is about to replace; writing that back would take the worker's
// checkpoint back for good (it believes its own saved). Such a caller
// writes back only when no worker runs (it takes worker.lock), and reads
// the file again under that lock: a worker that stopped meanwhile wrote
// its last value. Leaving the file as it is, is harmless, since every
// reader resolves it the same way; and the worker (owner true) writes back
// at its start whatever the file holds, so that a value past the end left
// by an older version, which a later append would turn into a valid
// checkpoint past undelivered messages, never outlives the first worker.
//
// A file that holds neither a checkpoint nor a drain marker (cut short,
// zeros, a checksum that fails: see checkpointDamage) resolves to 0, so
// that the messages of the log are delivered again rather than lost, and
// is returned as damage when it is written back: by the owner, or under
// worker.lock, where no worker's write can be half done.
func (q *Queue) resolveCheckpointFile(end int64, owner bool) (int64, []Damage, error) {
	// read reads the file and resolves it; plain is true when it holds
	// the resolved value as a checkpoint already (or nothing)
	var damage []Damage
	read := func() (ckpt int64, plain bool, err error) {
		b, err := readValueFile(q.fs, q.path(ckptFile))
		if err != nil {
			return 0, false, err
		}
		if ckpt, err = resolveCheckpoint(b, q.seg(), end); err != nil {
			return 0, false, err
		}
		damage = nil
		if d, ok := checkpointDamage(b); ok {
			damage = []Damage{d}
		}
		v, ok := decodeValue(ckptMagic, b)
		return ckpt, len(b) == 0 || ok && int64(v) == ckpt, nil
	}
	ckpt, plain, err := read()
	if err != nil || plain {
		return ckpt, nil, err
	}
	if !owner {
		wl := NewFileLock(filepath.Join(q.dir, workerLockFile))
		if held, err := wl.TryLock(); err != nil || !held {
			// a worker runs: what was read may be its write half done,
			// and the worker rewrites the file at its next checkpoint
			return ckpt, nil, nil
		}
		defer wl.Unlock()
		if ckpt, plain, err = read(); err != nil || plain {
			return ckpt, nil, err
		}
	}
	return ckpt, damage, q.SaveCheckpoint(ckpt)
}

// checkpointDamage says what is wrong with b, the bytes read from
// segment.log.ckpt, when they hold neither a checkpoint nor a drain marker
// (and are not empty: no checkpoint yet). Either reads as 0
// (resolveCheckpoint).
func checkpointDamage(b []byte) (Damage, bool) {
	if len(b) == 0 {
		return Damage{}, false
	}
	if _, ok := decodeValue(ckptMagic, b); ok {
		return Damage{}, false
	}
	if _, ok := decodeValue(drainMagic, b); ok {
		return Damage{}, false
	}
	d := valueDamage(ckptFile, "checkpoint", b, ckptMagic, drainMagic)
	d.Reason += "; the messages in " + segmentFile + " are delivered again"
	return d, true
}

// valueDamage describes b, the bytes of a value file (file, holding a
// what) that do not verify: fewer than the 16 bytes of a value, or 16
// zeros, are a write cut short by a crash (Torn); anything else (a magic
// that is none of magics, a checksum that fails) is damage.
func valueDamage(file, what string, b []byte, magics ...[4]byte) Damage {
	d := Damage{File: file, Length: int64(len(b))}
	switch {
	case len(b) < valueSize:
		d.Torn = true
		d.Reason = fmt.Sprintf("a write cut short (a value is %d bytes)", valueSize)
	case !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }):
		d.Torn = true
		d.Reason = "zeros, a write that never reached the disk"
	case !slices.Contains(magics, [4]byte(b[:4])):
		d.Reason = fmt.Sprintf("no %s magic (%q)", what, b[:4])
	default:
		d.Reason = "its checksum does not verify"
	}
	return d
}

// syncCheckpoint makes segment.log.ckpt durable as it is (what the worker
// last wrote in place); a queue with none has nothing to sync.
func (q *Queue) syncCheckpoint() error {
	f, err := q.fs.OpenFile(q.path(ckptFile), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", ckptFile, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", ckptFile, err)
	}
	return nil
}

// saveCheckpointRecord rewrites segment.log.ckpt durably with one value:
// a checkpoint (ckptMagic) or a drain marker (drainMagic).
func (q *Queue) saveCheckpointRecord(magic [4]byte, v uint64) error {
	f, err := q.openCheckpoint()
	if err != nil {
		return err
	}
	err = writeCheckpointRecord(f, magic, v, true)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("writing %s: %w", ckptFile, cerr)
	}
	return err
}

// openCheckpoint opens segment.log.ckpt for rewriting in place; a missing
// file is created and its folder entry made durable, so that a synced
// value survives a power cut.
func (q *Queue) openCheckpoint() (File, error) {
	f, err := q.fs.OpenFile(q.path(ckptFile), os.O_RDWR, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", ckptFile, err)
		}
		return f, nil
	}
	if f, err = q.fs.OpenFile(q.path(ckptFile), os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		return nil, fmt.Errorf("creating %s: %w", ckptFile, err)
	}
	if err := q.fs.SyncDir(q.dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("syncing the folder of %s: %w", ckptFile, err)
	}
	return f, nil
}

// writeCheckpoint rewrites the checkpoint in place (16 bytes at offset 0,
// within one sector), fsynced when durable is set. A checkpoint that is
// lost or torn by a power cut reads as an older value or as 0: messages
// are delivered again, never skipped.
func writeCheckpoint(f File, offset int64, durable bool) error {
	return writeCheckpointRecord(f, ckptMagic, uint64(offset), durable)
}

func writeCheckpointRecord(f File, magic [4]byte, v uint64, durable bool) error {
	if _, err := f.WriteAt(encodeValue(magic, v), 0); err != nil {
		return fmt.Errorf("writing %s: %w", ckptFile, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", ckptFile, err)
		}
	}
	return nil
}

// ErrNotDrained is returned by Drain when the log holds unprocessed
// messages.
var ErrNotDrained = errors.New("the queue has unprocessed messages")

// Drain empties segment.log in place when everything in it is processed
// (the checkpoint is at its end) and every pending retry carries its
// message (none reads it from the log; see Retry.Message): the id counter is
// made durable first (ids keep counting), a drain marker replaces the
// checkpoint, the log is truncated, then the checkpoint goes back to 0, all
// under the append lock so that no process appends meanwhile (see the
// package's Side files for why the marker). A log that is empty already,
// the file at its path, is left as it is without taking the lock: its
// worker drains at every idle moment, and an idle queue's log is empty.
func (q *Queue) Drain() error { return q.drain(nil) }

// drain is Drain; carried reports whether every pending retry carries its
// message (nil: the schedule is read from its file). The queue's worker,
// the schedule's one writer, answers from its own.
func (q *Queue) drain(carried func() bool) error {
	if q.emptyAtPath() {
		// under the lock, the same answer: nothing to empty, no file to
		// take at the path; an append that follows the stat is one that
		// would have followed the unlock
		return nil
	}
	unlock, err := q.lockAppendBounded()
	if err != nil {
		return err
	}
	defer unlock()
	size, err := q.segmentAtPath()
	if err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	ckpt, err := q.Checkpoint()
	if err != nil {
		return err
	}
	if ckpt < size {
		return ErrNotDrained
	}
	if carried == nil {
		rs, err := q.Retries()
		if err != nil {
			return err
		}
		carried = func() bool {
			return !slices.ContainsFunc(rs, func(r Retry) bool { return r.Message == nil })
		}
	}
	if !carried() {
		return ErrNotDrained
	}
	next, err := q.nextID(size)
	if err != nil {
		return err
	}
	// the counter durable first (ids keep counting across the drain), then
	// the drain marked in the checkpoint, the log emptied, and the
	// checkpoint back to 0. A process that dies anywhere in between leaves
	// a checkpoint that still tells the emptied log's messages (ids below
	// next) from those appended since: none is delivered again, none
	// skipped (a checkpoint left past the end of the emptied log once made
	// a process taking the queue over skip what others appended to it)
	if err := q.writeSeq(next, true); err != nil {
		return err
	}
	if err := writeCounterCopy(q.lock, next); err != nil {
		return err
	}
	if err := q.markDrain(next); err != nil {
		return err
	}
	if err := q.seg().Truncate(0); err != nil {
		return err
	}
	q.durable.Store(0) // nothing past 0 is known durable, whatever follows
	if err := q.seg().Sync(); err != nil {
		return err
	}
	return q.SaveCheckpoint(0)
}

// markDrain records, durably, that the log of messages with ids below next
// is processed and being emptied.
func (q *Queue) markDrain(next uint64) error {
	return q.saveCheckpointRecord(drainMagic, next)
}

// resolveCheckpoint reads the checkpoint file's bytes b against the log seg
// of size bytes. A checkpoint past the end is 0 (the log was emptied after
// it was written, by a version that did not mark its drains). A drain
// marker, left by a drain or the janitor stopped midway, is the offset of
// the first message with an id at or past its value: the frames before it
// are the processed log the drain was emptying, the ones from it on were
// appended since (by any process), whether the log was emptied or not.
// Anything else is 0.
func resolveCheckpoint(b []byte, seg File, size int64) (int64, error) {
	if v, ok := decodeValue(ckptMagic, b); ok {
		if v > uint64(size) { // compared unsigned: a value past 2^63 is past the end too
			return 0, nil
		}
		return int64(v), nil
	}
	next, ok := decodeValue(drainMagic, b)
	if !ok {
		return 0, nil
	}
	at := int64(-1)
	// the ids only: each frame's CRC checked through a small buffer
	// (scanHeads), a message of 64 MiB read, not held
	end, err := scanHeads(seg, segmentFile, 0, size, func(head []byte, _, off int64) error {
		if len(head) >= 9 && head[0] == kindMessage && binary.BigEndian.Uint64(head[1:9]) >= next {
			at = off
			return errStopScan
		}
		return nil
	}, func(Damage) {})
	switch {
	case at >= 0:
		return at, nil
	case err != nil:
		return 0, err
	}
	return end, nil
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop the scan")

// NextID is the id the next message will get.
func (q *Queue) NextID() (uint64, error) {
	unlock, err := q.lockAppend()
	if err != nil {
		return 0, err
	}
	defer unlock()
	return q.readSeq()
}

// readAhead is how much of segment.log a worker reads with one pread.
const readAhead = 64 << 10

// logReader reads segment.log ahead for the worker: one pread fetches up
// to readAhead bytes of durable frames, which are then decoded from memory.
// What does not verify in the buffer (damage, a frame larger than the
// buffer) is left to Queue.Read, which knows how to skip damage. Frames
// never change once durable; the worker resets the reader when it empties
// the log.
type logReader struct {
	q     *Queue
	buf   []byte
	start int64  // the log offset of data[0]
	data  []byte // the bytes read, a prefix of buf
}

func newLogReader(q *Queue) *logReader { return &logReader{q: q} }

// Read is Queue.Read, from the buffer when it can.
func (r *logReader) Read(offset int64) (Message, int64, error) {
	if m, next, ok := r.buffered(offset); ok {
		return m, next, nil
	}
	r.q.segMu.RLock()
	defer r.q.segMu.RUnlock()
	size, err := r.q.readableEnd()
	if err != nil {
		return Message{}, offset, err
	}
	if offset >= size {
		// the end, as Queue.Read would say it from this same end
		// (asking it cost an idle worker a second fstat at each poll)
		return Message{}, offset, io.EOF
	}
	if r.buf == nil {
		r.buf = make([]byte, readAhead)
	}
	n := min(size-offset, int64(len(r.buf)))
	r.data = nil
	if _, err := r.q.seg().ReadAt(r.buf[:n], offset); err == nil {
		r.start, r.data = offset, r.buf[:n]
		if m, next, ok := r.buffered(offset); ok {
			return m, next, nil
		}
	}
	return r.q.read(offset)
}

// buffered decodes the message whose frame starts at offset, when the
// buffer holds all of it and it verifies.
func (r *logReader) buffered(offset int64) (Message, int64, bool) {
	i := offset - r.start
	if r.data == nil || i < 0 || i >= int64(len(r.data)) {
		return Message{}, 0, false
	}
	rec, n, ok := frameIn(r.data[i:])
	if !ok {
		return Message{}, 0, false
	}
	m, err := decodeMessage(rec, offset)
	if err != nil {
		return Message{}, 0, false
	}
	return m, offset + int64(n), true
}

// reset forgets what was read: the log was emptied. The buffer goes too:
// an idle queue's worker (one per queue, for the process's life) held its
// 64 KiB until the next delivery.
func (r *logReader) reset() { r.buf, r.data = nil, nil }
