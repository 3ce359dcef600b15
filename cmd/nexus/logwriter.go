package main

import (
	"io"
	"sync"
	"time"
)

// logWriter takes the log's lines off the request path: Write copies the
// line into a buffer and returns, and one goroutine writes the buffer out,
// at most once per gather interval: the lines of that interval go out in
// one write(2), and a quiet host wakes the goroutine once per interval at
// most instead of once per line. No line is dropped for want of room:
// when maxBuffered bytes wait, Write waits for the write in progress. The
// lines of a write out that fails (the reader gone: EPIPE; a full disk)
// are dropped, and the host goes on: the log has nowhere to say so. Close
// writes what is left and makes later writes synchronous. A process
// killed with SIGKILL loses only the lines still in the buffer (at most
// one interval's).
type logWriter struct {
	w           io.Writer
	maxBuffered int
	gather      time.Duration

	mu      sync.Mutex
	drained *sync.Cond // signalled after each write-out
	buf     []byte     // lines waiting
	spare   []byte     // the other buffer, reused
	closed  bool
	kick    chan struct{} // capacity 1: there are lines to write
	closing chan struct{} // closed by Close: no more waiting for an interval
	done    chan struct{} // closed when the writing goroutine has ended
}

// newLogWriter starts the writer of w.
func newLogWriter(w io.Writer, maxBuffered int, gather time.Duration) *logWriter {
	l := &logWriter{w: w, maxBuffered: maxBuffered, gather: gather, kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	l.drained = sync.NewCond(&l.mu)
	go l.loop()
	return l
}

// Write buffers p (one log line) and returns at once, unless the buffer is
// full. It never fails: an error writing the log out has nowhere to go.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	for len(l.buf) > 0 && len(l.buf)+len(p) > l.maxBuffered && !l.closed {
		l.drained.Wait()
	}
	if !l.closed {
		l.buf = append(l.buf, p...)
		select {
		case l.kick <- struct{}{}:
		default:
		}
		l.mu.Unlock()
		return len(p), nil
	}
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writeLeftLocked()
	l.w.Write(p)
	return len(p), nil
}

func (l *logWriter) loop() {
	defer close(l.done)
	wait := time.NewTimer(l.gather)
	defer wait.Stop()
	for range l.kick {
		// the lines of the interval join the first, unless the writer closes
		wait.Reset(l.gather)
		select {
		case <-wait.C:
		case <-l.closing:
		}
		l.mu.Lock()
		b := l.buf
		l.buf, l.spare = l.spare[:0], nil
		l.mu.Unlock()
		if len(b) > 0 {
			l.w.Write(b)
		}
		l.mu.Lock()
		l.spare = b[:0]
		l.drained.Broadcast()
		l.mu.Unlock()
	}
}

// writeLeftLocked writes what is buffered, once the writing goroutine has
// ended.
func (l *logWriter) writeLeftLocked() {
	if len(l.buf) > 0 {
		l.w.Write(l.buf)
		l.buf = l.buf[:0]
	}
}

// Close writes the lines still buffered and waits for it; later writes go
// to the underlying writer directly. Safe to call twice.
func (l *logWriter) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.closing)
		close(l.kick)
		l.drained.Broadcast()
	}
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writeLeftLocked()
	return nil
}
