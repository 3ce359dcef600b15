package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is the log's destination in these tests: it counts the
// write calls, and can be held shut to stand for a slow collector.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	gate   chan struct{} // when set, each Write waits for it to be closed
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSuffix(l.b.String(), "\n"), "\n")
}

// Every line of every writer arrives whole, in each writer's order, and
// lines written together share write calls.
func TestLogWriterKeepsEveryLineInOrder(t *testing.T) {
	out := &lockedBuffer{}
	lw := newLogWriter(out, 4<<10, time.Millisecond)
	const writers, each = 16, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				fmt.Fprintf(lw, "writer %d line %d %s\n", w, i, strings.Repeat("x", i%50))
			}
		})
	}
	wg.Wait()
	lw.Close()
	next := make([]int, writers)
	lines := out.lines()
	for _, line := range lines {
		var w, i int
		if _, err := fmt.Sscanf(line, "writer %d line %d", &w, &i); err != nil {
			t.Fatalf("a torn line %q: %v", line, err)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d after line %d", w, i, next[w]-1)
		}
		if want := fmt.Sprintf("writer %d line %d %s", w, i, strings.Repeat("x", i%50)); line != want {
			t.Fatalf("line %q, want %q", line, want)
		}
		next[w]++
	}
	if len(lines) != writers*each {
		t.Errorf("%d lines, want %d", len(lines), writers*each)
	}
	t.Logf("%d lines in %d writes", len(lines), out.writes)
}

// A stalled destination makes writers wait once the buffer is full: no
// line is dropped, and memory stays bounded.
func TestLogWriterWaitsWhenFull(t *testing.T) {
	out := &lockedBuffer{gate: make(chan struct{})}
	lw := newLogWriter(out, 100, time.Millisecond)
	line := strings.Repeat("y", 39) + "\n" // 40 bytes
	lw.Write([]byte(line))                 // taken by the writing goroutine, which blocks
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		lw.mu.Lock()
		taken := len(lw.buf) == 0
		lw.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writing goroutine did not take the first line")
		}
	}
	lw.Write([]byte(line)) // buffered
	lw.Write([]byte(line)) // buffered: 80 bytes
	blocked := make(chan struct{})
	go func() {
		lw.Write([]byte(line)) // 120 > 100: waits
		close(blocked)
	}()
	select {
	case <-blocked:
		t.Fatal("a write past the buffer's size returned while the destination was stalled")
	case <-time.After(50 * time.Millisecond):
	}
	close(out.gate)
	<-blocked
	lw.Close()
	if got := len(out.lines()); got != 4 {
		t.Errorf("%d lines written, want 4", got)
	}
}

// Close writes what is buffered at once, without waiting out the
// interval; a line written after Close goes out directly, after it.
func TestLogWriterCloseFlushes(t *testing.T) {
	out := &lockedBuffer{}
	lw := newLogWriter(out, 1<<20, time.Hour)
	for i := range 100 {
		fmt.Fprintf(lw, "line %d\n", i)
	}
	lw.Close()
	if out.writes != 1 {
		t.Errorf("100 lines of one interval took %d writes, want 1", out.writes)
	}
	lw.Close()
	fmt.Fprintf(lw, "after close\n")
	lines := out.lines()
	if len(lines) != 101 || lines[0] != "line 0" || lines[99] != "line 99" || lines[100] != "after close" {
		t.Errorf("lines = %d, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}
