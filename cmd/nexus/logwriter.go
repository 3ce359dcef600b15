package main

import (
	"io"
	"sync"
)

// logWriter takes the log's lines off the request path: Write copies the
// line into a buffer and returns, and one goroutine writes the buffer out.
// Lines that arrive while a write is in progress go out together in the
// next one, so a busy host makes one write(2) for many lines, and a quiet
// one writes each line at once (there is no timer). No line is dropped:
// when maxBuffered bytes wait, Write waits for the write in progress. Close
// writes what is left and makes later writes synchronous. A process killed
// with SIGKILL loses only the lines still in the buffer.
type logWriter struct {
	w           io.Writer
	maxBuffered int

	mu      sync.Mutex
	drained *sync.Cond // signalled after each write-out
	buf     []byte     // lines waiting
	spare   []byte     // the other buffer, reused
	closed  bool
	kick    chan struct{} // capacity 1: there are lines to write
	done    chan struct{} // closed when the writing goroutine has ended
}

// newLogWriter starts the writer of w.
func newLogWriter(w io.Writer, maxBuffered int) *logWriter {
	l := &logWriter{w: w, maxBuffered: maxBuffered, kick: make(chan struct{}, 1), done: make(chan struct{})}
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
	for range l.kick {
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
