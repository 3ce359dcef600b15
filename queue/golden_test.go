package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

var update = flag.Bool("update", false, "rewrite queue/testdata/*.golden from the code's output")

// The fixture's values.
var (
	fixtureMessage = NewMessage{
		Source:        "enqueue",
		CorrelationID: "c0ffee-7",
		Payload:       []byte(`{"orderId":"A-1","total":42}`),
	}
	fixtureRetries = []Retry{
		{ID: 1, Offset: 0, Attempt: 2, Due: epoch.Add(1500 * time.Millisecond)},
		{ID: 2, Offset: 77, Attempt: 3, Due: epoch.Add(4500 * time.Millisecond)},
		// one that carries its message (the worker's since version 6 of
		// the schedule's records)
		{ID: 3, Offset: 154, Attempt: 2, Due: epoch.Add(6 * time.Second), Message: &Message{
			ID: 3, Offset: 154, EnqueuedAt: epoch.Add(time.Second), Source: "cron", CorrelationID: "c0ffee-9", Payload: []byte(`{"orderId":"A-3"}`)}},
	}
	fixtureDeadLetter = DeadLetter{
		ID:         7,
		EnqueuedAt: epoch,
		FailedAt:   epoch.Add(3 * time.Second),
		Attempts:   3,
		LastError:  "step 'forward': effect handler failed: HTTP 503 Service Unavailable",
		Payload:    []byte(`{"orderId":"A-7"}`),
	}
	fixtureMarkedAt = epoch.Add(time.Minute)
)

// fixtureFiles writes one of each frame and side file through the real
// code, with a fixed clock, and returns the files' bytes by golden name.
func fixtureFiles(t *testing.T) map[string][]byte {
	root := t.TempDir()
	c := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{Now: c.Now})
	if _, err := q.Append(fixtureMessage); err != nil {
		t.Fatal(err)
	}
	size, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	if err := q.SaveRetries(fixtureRetries); err != nil {
		t.Fatal(err)
	}
	// and a change as the worker appends it: the first retry cleared
	sched, _, err := q.openRetrySchedule()
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.clear(fixtureRetries[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(fixtureDeadLetter); err != nil {
		t.Fatal(err)
	}
	c.AdvanceTo(fixtureMarkedAt)
	if err := q.Mark(fixtureDeadLetter.ID, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"message":     segmentFile,
		"seq":         seqFile,
		"ckpt":        ckptFile,
		"retry":       retryFile,
		"dead_letter": dlqFile,
		"mark":        ackedFile,
	}
	out := map[string][]byte{}
	for golden, name := range files {
		out[golden] = fileBytes(t, OS{}, root, name)
	}
	// the drain marker, as a drain writes it before it empties the log
	if err := q.markDrain(2); err != nil {
		t.Fatal(err)
	}
	out["drain_marker"] = fileBytes(t, OS{}, root, ckptFile)
	return out
}

// TestGolden pins the bytes on disk: testdata/{name}.golden holds the hex
// dump of each file. go test ./queue -run TestGolden -update rewrites them.
func TestGolden(t *testing.T) {
	for name, got := range fixtureFiles(t) {
		path := filepath.Join("testdata", name+".golden")
		dump := hex.Dump(got)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(dump), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if dump != string(want) {
			t.Errorf("%s: the bytes on disk changed.\ngot:\n%swant:\n%s", name, dump, want)
		}
	}
}

// TestFormatMatchesDoc builds each file again from the byte-by-byte
// description in doc.go, independently of the code's encoders.
func TestFormatMatchesDoc(t *testing.T) {
	got := fixtureFiles(t)
	be := binary.BigEndian
	crc := func(b []byte) []byte {
		return be.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	u16 := func(v int) []byte { return be.AppendUint16(nil, uint16(v)) }
	u32 := func(v int) []byte { return be.AppendUint32(nil, uint32(v)) }
	u64 := func(v uint64) []byte { return be.AppendUint64(nil, v) }
	ns := func(t time.Time) []byte { return u64(uint64(t.UnixNano())) }
	frame := func(rec []byte) []byte {
		length := u32(len(rec))
		return cat([]byte("NXQ1"), length, crc(cat(length, rec)), rec)
	}
	value := func(magic string, v uint64) []byte {
		b := cat([]byte(magic), u64(v))
		return cat(b, crc(b))
	}

	m, d := fixtureMessage, fixtureDeadLetter
	msgFrame := frame(cat([]byte{1}, u64(1), ns(epoch),
		[]byte{byte(len(m.Source))}, []byte(m.Source),
		u16(len(m.CorrelationID)), []byte(m.CorrelationID), m.Payload))
	var retries []byte
	for _, r := range fixtureRetries {
		if c := r.Message; c != nil {
			retries = cat(retries, frame(cat([]byte{6}, u64(r.ID), u64(uint64(r.Offset)), u32(r.Attempt), ns(r.Due),
				ns(c.EnqueuedAt), []byte{byte(len(c.Source))}, []byte(c.Source),
				u16(len(c.CorrelationID)), []byte(c.CorrelationID), c.Payload)))
			continue
		}
		retries = cat(retries, frame(cat([]byte{4}, u64(r.ID), u64(uint64(r.Offset)), u32(r.Attempt), ns(r.Due))))
	}
	retries = cat(retries, frame(cat([]byte{5}, u64(fixtureRetries[0].ID))))
	want := map[string][]byte{
		"message": msgFrame,
		"seq":     value("NXS1", 2),
		"ckpt":    value("NXC1", uint64(len(msgFrame))),
		"retry":   retries,
		"dead_letter": frame(cat([]byte{2}, u64(d.ID), ns(d.EnqueuedAt), ns(d.FailedAt),
			u32(d.Attempts), u32(len(d.LastError)), []byte(d.LastError), d.Payload)),
		"mark": frame(cat([]byte{3}, u64(d.ID), ns(fixtureMarkedAt), []byte{MarkDiscarded})),
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("%s differs from doc.go.\ngot:\n%swant:\n%s", name, hex.Dump(got[name]), hex.Dump(w))
		}
	}
	if !strings.HasPrefix(string(got["message"]), "NXQ1") {
		t.Errorf("a frame does not start with its magic")
	}
}
