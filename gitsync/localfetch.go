package gitsync

import (
	"bufio"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/file"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// A repo given as a local path or a file:// URL is fetched as go-git
// fetches one, by running git-upload-pack, when the host has the git
// command; on a host without it (the release image is distroless) by
// go-git's own upload-pack, in this process, reading the repo's files.
// Without it, every round failed: exec: "git": executable file not found.

func init() {
	client.InstallProtocol("file", localTransport{})
}

// localTransport is the transport of local repos: git's, else go-git's.
type localTransport struct{}

func (localTransport) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	s, err := file.DefaultClient.NewUploadPackSession(ep, auth)
	if err == nil {
		return gitSession{s}, nil
	}
	if _, ok := errors.AsType[*exec.Error](err); !ok {
		return s, err // git's error
	}
	// no git command: the repo is read here, opened when its references
	// are asked for (AdvertisedReferencesContext), under the fetch's
	// timeout
	return &localSession{ep: ep, auth: auth}, nil
}

// openLocal opens the repo at ep (a checkout, a bare one, or a linked
// work tree, whose refs and objects are its main repository's) and
// returns go-git's upload-pack session over it, and its storage.
func openLocal(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, storer.Storer, error) {
	repo, err := git.PlainOpenWithOptions(ep.Path, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, nil, transport.ErrRepositoryNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	closeStorer(repo.Storer)
	fs, ok := repo.Storer.(interface{ Filesystem() billy.Filesystem })
	if !ok {
		return nil, nil, fmt.Errorf("repo %s: unexpected storage %T", ep.Path, repo.Storer)
	}
	// an object over largeObjectBytes is streamed from its file, not read
	// into memory whole
	st := filesystem.NewStorageWithOptions(fs.Filesystem(), cache.NewObjectLRU(localCacheBytes),
		filesystem.Options{LargeObjectThreshold: largeObjectBytes})
	s, err := server.NewServer(storerLoader{st}).NewUploadPackSession(ep, auth)
	if err != nil {
		closeStorer(st)
		return nil, nil, err
	}
	return s, st, nil
}

// gitSession is git's upload-pack over a local repo (go-git runs
// git-upload-pack and talks to it over pipes, no connection of the
// fetch's), watched as a connection is: its references, the answer to
// the request and each read of the pack must come within the fetch's
// FetchTimeout (a hung disk or network file system under the repo), or
// the round ends (no answer within …). It held the round, and the sync
// lock, up to maxFetchTime.
type gitSession struct {
	transport.UploadPackSession
}

// AdvertisedReferencesContext is git's, within the fetch's FetchTimeout.
func (s gitSession) AdvertisedReferencesContext(ctx context.Context) (*packp.AdvRefs, error) {
	ctx, silence := watchSilence(ctx)
	defer silence.stop()
	ar, err := s.UploadPackSession.AdvertisedReferencesContext(ctx)
	return ar, silence.err(err)
}

// UploadPack is git's; the answer and each read of the pack come within
// the fetch's FetchTimeout.
func (s gitSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	ctx, silence := watchSilence(ctx)
	resp, err := s.UploadPackSession.UploadPack(ctx, req)
	if err != nil {
		silence.stop()
		return nil, silence.err(err)
	}
	silence.moved()
	return packp.NewUploadPackResponseWithPackfile(req, &silentPack{resp, silence}), nil
}

// silenceWatch ends its context when nothing moved for its fetch's
// FetchTimeout, and says so in the fetch's watch (timedOut).
type silenceWatch struct {
	w      *fetchWatch // nil: no watch, nothing timed
	timer  *time.Timer
	cancel context.CancelFunc
	fired  atomic.Bool
}

// watchSilence watches, under ctx, the fetch whose watch ctx carries.
func watchSilence(ctx context.Context) (context.Context, *silenceWatch) {
	ctx, cancel := context.WithCancel(ctx)
	s := &silenceWatch{cancel: cancel}
	if w, _ := ctx.Value(watchKey{}).(*fetchWatch); w != nil {
		s.w = w
		s.timer = time.AfterFunc(w.idle, func() {
			s.fired.Store(true)
			w.timedOut.Store(true)
			cancel()
		})
	}
	return ctx, s
}

// moved restarts the wait: bytes came.
func (s *silenceWatch) moved() {
	if s.timer != nil && !s.fired.Load() {
		s.timer.Reset(s.w.idle)
	}
}

// stop ends the watch and its context.
func (s *silenceWatch) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.cancel()
}

// err is err, or errLocalStalled when the watch ended the wait.
func (s *silenceWatch) err(err error) error {
	if err != nil && s.fired.Load() {
		return fmt.Errorf("%w (%v)", errLocalStalled, err)
	}
	return err
}

// silentPack is git's pack, each read of it watched.
type silentPack struct {
	resp    *packp.UploadPackResponse
	silence *silenceWatch
}

func (p *silentPack) Read(b []byte) (int, error) {
	n, err := p.resp.Read(b)
	if n > 0 {
		p.silence.moved()
	}
	return n, p.silence.err(err)
}

func (p *silentPack) Close() error {
	p.silence.stop()
	return p.resp.Close()
}

func (localTransport) NewReceivePackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	return file.DefaultClient.NewReceivePackSession(ep, auth) // never used: nothing is pushed
}

// storerLoader loads the one repo it holds.
type storerLoader struct{ st storer.Storer }

func (l storerLoader) Load(*transport.Endpoint) (storer.Storer, error) { return l.st, nil }

// localCacheBytes bounds the objects a local repo's storage keeps in
// memory once read: a pack reads each object once, so a cache the size of
// go-git's default (96 MB) only held what had been sent.
const localCacheBytes = 1 * cache.MiByte

// localSession is go-git's upload-pack over a local repo, opened when
// its references are asked for: go-git's session advertises them;
// UploadPack is this file's.
type localSession struct {
	transport.UploadPackSession // nil before the references are read
	ep                          *transport.Endpoint
	auth                        transport.AuthMethod
	st                          storer.Storer
	done                        chan struct{} // closed when the pack is written (nil before UploadPack)
}

// AdvertisedReferences is AdvertisedReferencesContext without a fetch.
func (s *localSession) AdvertisedReferences() (*packp.AdvRefs, error) {
	return s.AdvertisedReferencesContext(context.Background())
}

// AdvertisedReferencesContext opens the repo and reads its references,
// in the background: if that gives nothing for the fetch's FetchTimeout
// (a hung disk or network file system), or the fetch's context ends
// first, it fails as a read of the pack does, and the repo is closed
// once the file answers.
func (s *localSession) AdvertisedReferencesContext(ctx context.Context) (*packp.AdvRefs, error) {
	if s.UploadPackSession != nil {
		return s.UploadPackSession.AdvertisedReferencesContext(ctx)
	}
	type opened struct {
		s   transport.UploadPackSession
		st  storer.Storer
		ar  *packp.AdvRefs
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		var o opened
		o.s, o.st, o.err = openLocal(s.ep, s.auth)
		if o.err == nil {
			o.ar, o.err = o.s.AdvertisedReferencesContext(ctx)
		}
		ch <- o
	}()
	giveUp := func(err error) (*packp.AdvRefs, error) {
		go func() {
			if o := <-ch; o.s != nil {
				o.s.Close()
				closeStorer(o.st)
			}
		}()
		return nil, err
	}
	var idle <-chan time.Time
	w, _ := ctx.Value(watchKey{}).(*fetchWatch)
	if w != nil {
		t := time.NewTimer(w.idle)
		defer t.Stop()
		idle = t.C
	}
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		return giveUp(ctx.Err())
	case <-idle:
		select {
		case o = <-ch: // answered as the timer fired
		default:
			w.timedOut.Store(true)
			return giveUp(errLocalStalled)
		}
	}
	if o.s != nil {
		s.UploadPackSession, s.st = o.s, o.st
	}
	return o.ar, o.err
}

// errLocalStalled is the error of a fetch from a local repo whose files
// gave nothing for FetchTimeout; the fetch says how long it waited.
var errLocalStalled = errors.New("reading the repo's files stalled")

// UploadPack writes the pack of the objects the request wants and does
// not have, streamed: one object read at a time, written as it is read,
// through a pipe the fetch reads (go-git's upload-pack looks for deltas
// among the objects first, holding what it finds, before the first byte).
// The pack is written in the background; a read of it that gets nothing
// for the fetch's FetchTimeout fails (as a connection silent that long
// does: a hung disk or network file system), and so does one after the
// fetch's context ended, and either stops the writing at the next object.
//
// It leaves out the commits the clone has and the repo does not: git's
// upload-pack ignores them, go-git's fails on them (object not found), as
// after a force-push whose dropped commits were pruned.
func (s *localSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	if req.IsEmpty() {
		return nil, transport.ErrEmptyUploadPackRequest
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.Shallows) > 0 {
		return nil, errors.New("shallow fetches are not supported")
	}
	if s.done != nil {
		return nil, errors.New("one pack per session")
	}
	if s.st == nil {
		return nil, errors.New("the references were not read")
	}
	w, _ := ctx.Value(watchKey{}).(*fetchWatch)
	r, pw := newLocalPack(ctx, w)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		pw.CloseWithError(writeLocalPack(r.ctx, pw, s.st, req.Wants, req.Haves))
	}()
	return packp.NewUploadPackResponseWithPackfile(req, r), nil
}

// Close closes the session, and the repo's storage once no pack is being
// written from it (a read blocked on a hung file system ends when the
// file answers; the fetch does not wait for it).
func (s *localSession) Close() error {
	if s.UploadPackSession == nil {
		return nil // never opened, or left to close itself
	}
	err := s.UploadPackSession.Close()
	if s.done == nil {
		closeStorer(s.st)
		return err
	}
	go func() {
		<-s.done
		closeStorer(s.st)
	}()
	return err
}

// writeLocalPack writes to w the pack of the objects wants reach and haves
// do not, read from st one at a time, each whole (no deltas); the haves st
// does not hold are left out. It stops at the next object read once ctx
// ends. Every read of the repo is made here, in the background, so that
// one that stalls (a have's file too) is one the pack's reader times out.
func writeLocalPack(ctx context.Context, w io.Writer, st storer.EncodedObjectStorer, wants, haves []plumbing.Hash) error {
	known := haves[:0:0]
	for _, h := range haves {
		if err := ctx.Err(); err != nil {
			return err
		}
		if st.HasEncodedObject(h) == nil {
			known = append(known, h)
		}
	}
	cst := ctxStorer{EncodedObjectStorer: st, ctx: ctx}
	objs, err := localPackObjects(cst, wants, known)
	if err != nil {
		return err
	}
	sum := hash.New(hash.CryptoType)
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	head := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	binary.BigEndian.PutUint32(head[8:], uint32(len(objs)))
	if _, err := bw.Write(head); err != nil {
		return err
	}
	zw := zlib.NewWriter(bw)
	for _, h := range objs {
		if err := writeLocalObject(cst, bw, zw, h); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// localPackObjects returns the objects wants reach that haves do not, as
// git's upload-pack finds them: the commits the haves reach are walked
// once, reading commits only (a missing parent, of a shallow repo, ends
// its line); the commits wants reach are walked down to those; and the
// trees and files of the new commits are sent but for those of the
// commits the walk stopped at (the ones the clone has that the new ones
// build on), whose trees are walked once, their files not read. An
// object the clone has from an older commit may be sent again, which
// the pack may hold; none it needs is left out.
func localPackObjects(st storer.EncodedObjectStorer, wants, haves []plumbing.Hash) ([]plumbing.Hash, error) {
	// the commits the haves reach
	old := map[plumbing.Hash]plumbing.Hash{} // a commit's tree; zero: not a commit
	var oldTrees []plumbing.Hash
	// the walks' own stacks: wants and haves are the caller's (wants
	// go-git's request's)
	for todo := slices.Clone(haves); len(todo) > 0; {
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, ok := old[h]; ok {
			continue
		}
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		old[h] = plumbing.ZeroHash
		switch o.Type() {
		case plumbing.CommitObject:
			c, err := object.DecodeCommit(st, o)
			if err != nil {
				return nil, err
			}
			old[h] = c.TreeHash
			todo = append(todo, c.ParentHashes...)
		case plumbing.TagObject:
			t, err := object.DecodeTag(st, o)
			if err != nil {
				return nil, err
			}
			todo = append(todo, t.Target)
		case plumbing.TreeObject:
			oldTrees = append(oldTrees, h)
		}
	}
	// the commits the wants reach and the haves do not, and the trees of
	// the commits of the haves they stop at
	sent := map[plumbing.Hash]bool{}
	var objs, trees []plumbing.Hash
	for todo := slices.Clone(wants); len(todo) > 0; {
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if sent[h] {
			continue
		}
		if tree, ok := old[h]; ok {
			if !tree.IsZero() {
				oldTrees = append(oldTrees, tree)
			}
			sent[h] = true // not sent: not walked twice
			continue
		}
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", h, err)
		}
		sent[h] = true
		switch o.Type() {
		case plumbing.CommitObject:
			c, err := object.DecodeCommit(st, o)
			if err != nil {
				return nil, err
			}
			objs = append(objs, h)
			trees = append(trees, c.TreeHash)
			todo = append(todo, c.ParentHashes...)
		case plumbing.TagObject:
			t, err := object.DecodeTag(st, o)
			if err != nil {
				return nil, err
			}
			objs = append(objs, h)
			todo = append(todo, t.Target)
		case plumbing.TreeObject:
			trees = append(trees, h)
			delete(sent, h) // walked with the trees
		default:
			objs = append(objs, h)
		}
	}
	seen := map[plumbing.Hash]bool{}
	if _, err := walkTrees(st, oldTrees, seen); err != nil {
		return nil, err
	}
	more, err := walkTrees(st, trees, seen)
	if err != nil {
		return nil, err
	}
	return append(objs, more...), nil
}

// walkTrees returns the trees and files trees reach that are not in
// seen, and adds them to it; a tree in seen is not read again, nor its
// entries. The files are not read; nor are submodules' commits named.
func walkTrees(st storer.EncodedObjectStorer, trees []plumbing.Hash, seen map[plumbing.Hash]bool) ([]plumbing.Hash, error) {
	var objs []plumbing.Hash
	for todo := slices.Clone(trees); len(todo) > 0; {
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[h] {
			continue
		}
		seen[h] = true
		objs = append(objs, h)
		t, err := object.GetTree(st, h)
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range t.Entries {
			switch {
			case e.Mode == filemode.Submodule || seen[e.Hash]:
			case e.Mode == filemode.Dir:
				todo = append(todo, e.Hash)
			default:
				seen[e.Hash] = true
				objs = append(objs, e.Hash)
			}
		}
	}
	return objs, nil
}

// writeLocalObject writes the object h of st to bw as a pack entry: its
// type and size, then its content through zw.
func writeLocalObject(st storer.EncodedObjectStorer, bw *bufio.Writer, zw *zlib.Writer, h plumbing.Hash) (err error) {
	o, err := st.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	// type and size: 3 bits of type and the size's 4 low bits, then 7
	// bits of size a byte while more follow
	size := uint64(o.Size())
	b := byte(o.Type())<<4 | byte(size&0x0f)
	for size >>= 4; size > 0; size >>= 7 {
		bw.WriteByte(b | 0x80)
		b = byte(size & 0x7f)
	}
	if err := bw.WriteByte(b); err != nil {
		return err
	}
	r, err := o.Reader()
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	defer r.Close()
	zw.Reset(bw)
	if _, err := io.Copy(zw, r); err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	return zw.Close()
}

// ctxStorer is a storage whose object reads fail once ctx has ended.
type ctxStorer struct {
	storer.EncodedObjectStorer
	ctx context.Context
}

func (s ctxStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	return s.EncodedObjectStorer.EncodedObject(t, h)
}

// localPackReader is the fetch's end of the pipe a local pack is written
// into (localPackWriter the other). A read that gets nothing for its
// watch's idle time fails, noted as the fetch's timeout; so does one once
// the fetch's context ended. Whether a read got nothing is decided under
// the pipe's lock, with the writes: bytes written, read or not yet, are
// not silence, however late the read's timer fires.
type localPackReader struct {
	w      *fetchWatch // nil: no idle bound
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
	// afterFunc arms a read's timer: time.AfterFunc's, a test's own
	afterFunc func(time.Duration, func()) func() bool

	mu      sync.Mutex
	moved   sync.Cond // bytes written or read, or an end
	data    []byte    // written and not yet read
	reads   uint64    // reads that got bytes: what a timer checks
	written bool      // the writer is done: then end
	end     error     // the writer's error, else io.EOF
	closed  error     // the read side's end: a stall, the context's, Close
}

// localPackWriter is the end of the pipe the pack is written into.
type localPackWriter struct{ r *localPackReader }

// newLocalPack returns the two ends of a local pack's pipe, the fetch
// under ctx reading it, watched by w (nil: no idle bound).
func newLocalPack(ctx context.Context, w *fetchWatch) (*localPackReader, localPackWriter) {
	ctx, cancel := context.WithCancel(ctx)
	r := &localPackReader{w: w, ctx: ctx, cancel: cancel,
		afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
	r.moved.L = &r.mu
	r.stop = context.AfterFunc(ctx, func() { r.closeRead(ctx.Err()) })
	return r, localPackWriter{r}
}

func (r *localPackReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	if r.w != nil {
		armed := r.reads
		stop := r.afterFunc(r.w.idle, func() { r.expire(armed) })
		defer stop() // after the unlock: a timer firing now takes the lock
	}
	defer r.mu.Unlock()
	for len(r.data) == 0 && !r.written && r.closed == nil {
		r.moved.Wait()
	}
	switch {
	case r.closed != nil:
		return 0, r.closed
	case len(r.data) > 0:
		n := copy(p, r.data)
		r.data = r.data[n:]
		r.reads++
		r.moved.Broadcast()
		return n, nil
	default:
		return 0, r.end
	}
}

// expire ends the reads as stalled if none got bytes since the timer
// armed at reads was, none are waiting to be read, and the pack did not
// end.
func (r *localPackReader) expire(armed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads != armed || len(r.data) > 0 || r.written || r.closed != nil {
		return
	}
	r.w.timedOut.Store(true)
	r.closed = errLocalStalled
	r.moved.Broadcast()
}

// closeRead ends the reads, and the writes, with err.
func (r *localPackReader) closeRead(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed == nil {
		r.closed = err
		r.moved.Broadcast()
	}
}

// Close stops the writing of the pack.
func (r *localPackReader) Close() error {
	r.stop()
	r.cancel()
	r.closeRead(io.ErrClosedPipe)
	return nil
}

// Write hands p to the reads, returning once they took it all, or the
// reads ended (with their error).
func (w localPackWriter) Write(p []byte) (int, error) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed != nil {
		return 0, r.closed
	}
	r.data = p
	r.moved.Broadcast()
	for len(r.data) > 0 && r.closed == nil {
		r.moved.Wait()
	}
	n := len(p) - len(r.data)
	r.data = nil
	if n < len(p) {
		return n, r.closed
	}
	return n, nil
}

// CloseWithError ends the pack: the reads end with err, or io.EOF.
func (w localPackWriter) CloseWithError(err error) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	if !r.written {
		r.written, r.end = true, err
		r.moved.Broadcast()
	}
}

func closeStorer(st storer.Storer) {
	if c, ok := st.(io.Closer); ok {
		c.Close()
	}
}
