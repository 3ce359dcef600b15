package queue

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRetriesVerifyALargeRecordStreaming: Retries (the counts, the janitor,
// Drain) and the worker's schedule as it starts check each frame's CRC
// through a small buffer, and decode the header fields only: a retry that
// carries a message of several MiB is read, verified, with no more than a
// few hundred KiB allocated, and one whose payload is damaged is refused.
// They read each whole record into one buffer just to check its CRC: up to
// 64 MiB for one Retries call.
func TestRetriesVerifyALargeRecordStreaming(t *testing.T) {
	const payload = 8 << 20
	q, path := retryQueue(t)
	big := Retry{ID: 7, Offset: 100, Attempt: 2, Due: epoch.Add(time.Minute), Message: &Message{
		ID: 7, Offset: 100, EnqueuedAt: epoch, Source: "enqueue", CorrelationID: strings.Repeat("c", maxCorrelationID),
		Payload: bytes.Repeat([]byte("x"), payload)}}
	small := retryAt(3, 2, time.Hour)
	if err := q.SaveRetries([]Retry{small, big}); err != nil {
		t.Fatal(err)
	}
	wantHead := *big.Message
	wantHead.Payload = nil
	var rs []Retry
	var err error
	n := allocated(func() { rs, err = q.Retries() })
	if err != nil || len(rs) != 2 || rs[0].ID != small.ID || rs[1].ID != big.ID || rs[1].Message == nil ||
		rs[1].Message.CorrelationID != wantHead.CorrelationID || rs[1].Message.Source != wantHead.Source || !rs[1].Message.EnqueuedAt.Equal(epoch) || rs[1].Message.Payload != nil {
		t.Fatalf("Retries() = %+v, %v; want the small retry and the large one's head", rs, err)
	}
	if limit := uint64(512 << 10); n > limit {
		t.Errorf("Retries allocated %d bytes (%.1f MiB) for a retry of %d MiB, want at most %d", n, float64(n)/(1<<20), payload>>20, limit)
	}
	n = allocated(func() {
		var s *retrySchedule
		if s, _, err = q.openRetrySchedule(); err == nil && s.Len() != 2 {
			t.Errorf("the worker's schedule holds %d retries, want 2", s.Len())
		}
	})
	if err != nil {
		t.Fatalf("the worker's open: %v", err)
	}
	if limit := uint64(512 << 10); n > limit {
		t.Errorf("the worker's open allocated %d bytes (%.1f MiB) for a retry of %d MiB, want at most %d", n, float64(n)/(1<<20), payload>>20, limit)
	}

	// a byte of the payload, in its middle, damaged: refused
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-payload/2] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if rs, err := q.Retries(); err == nil {
		t.Errorf("Retries() of a damaged large record = %+v, want an error", rs)
	}
	s, damage, err := q.openRetrySchedule()
	if err != nil {
		t.Fatalf("the worker's open: %v", err)
	}
	if len(damage) != 1 || damage[0].Torn || damage[0].Offset != retrySetFrame || damage[0].ID != big.ID {
		t.Errorf("damage %+v, want the large record's frame at %d", damage, retrySetFrame)
	}
	if lost := s.takeLost(); len(lost) != 1 || lost[0].Retry.ID != big.ID {
		t.Errorf("lost %+v, want the large retry", lost)
	}
}
