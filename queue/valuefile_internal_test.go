package queue

import (
	"os"
	"path/filepath"
	"testing"
)

// TestValueFilesWithBytesPastTheValue: segment.log.ckpt and
// segment.log.seq are rewritten in place, 16 bytes at offset 0, so bytes
// past them (a newline an editor added, a longer file copied over) stay
// there. Every reader reads the value from the first 16 bytes, as the
// queue's own counter read did: the checkpoint read the whole file, which
// never verified again, so the checkpoint was 0 for good (every start
// delivered the whole log again and it was never drained), and NextID,
// reading the whole counter, said 1 whatever ids were issued.
func TestValueFilesWithBytesPastTheValue(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	for i := range 4 {
		if _, err := q.Append(newMessage(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	end, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(end); err != nil {
		t.Fatal(err)
	}
	q.Close()
	dir := filepath.Join(root, testTenant, testFlow)
	for _, name := range []string{ckptFile, seqFile} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("\n"))
		f.Close()
	}

	q, _ = openQueue(t, root, Options{})
	if c, err := q.Checkpoint(); err != nil || c != end {
		t.Errorf("Checkpoint = %d, %v; want %d", c, err, end)
	}
	if c, _, err := q.ownCheckpoint(); err != nil || c != end {
		t.Errorf("the worker's checkpoint = %d, %v; want %d", c, err, end)
	}
	if err := q.SaveCheckpoint(end / 2); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Checkpoint(); err != nil || c != end/2 {
		t.Errorf("Checkpoint after SaveCheckpoint(%d) = %d, %v", end/2, c, err)
	}
	if c, err := ReadCounts(root, testTenant, testFlow, nil); err != nil || c.Total != 4 || c.Processed != 2 {
		t.Errorf("ReadCounts = %+v, %v; want 2 of 4 processed (the checkpoint at %d)", c, err, end/2)
	}
	if err := q.SaveCheckpoint(end); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); err != nil {
		t.Errorf("Drain with the checkpoint at the end: %v", err)
	}
	m := NewManager(ManagerConfig{Root: root})
	if next, err := m.NextID(testTenant, testFlow); err != nil || next != 5 {
		t.Errorf("Manager.NextID = %d, %v; want 5", next, err)
	}
}
