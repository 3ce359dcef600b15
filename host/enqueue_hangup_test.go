package host_test

import (
	"io"
	"io/fs"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// heldSyncDisk is the OS, except that the first Sync of a segment.log
// waits until released, after saying it has begun.
type heldSyncDisk struct {
	queue.OS
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func (d *heldSyncDisk) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := d.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "segment.log" {
		return f, err
	}
	return &heldSyncFile{File: f, disk: d}, nil
}

type heldSyncFile struct {
	queue.File
	disk *heldSyncDisk
}

func (f *heldSyncFile) Sync() error {
	f.disk.once.Do(func() {
		close(f.disk.entered)
		<-f.disk.released
	})
	return f.File.Sync()
}

// TestEnqueueWhoseCallerHangsUpDuringTheSync: a caller of /enqueue that
// hangs up while its message's group commit syncs gets no answer, and
// the message, whole in the log, is delivered once, as every appended
// message is (queues-retries-dlq.md promises delivery to the 202s; an
// append no one heard of is delivered too, never lost nor half-written).
func TestEnqueueWhoseCallerHangsUpDuringTheSync(t *testing.T) {
	disk := &heldSyncDisk{entered: make(chan struct{}), released: make(chan struct{})}
	fx := newAdminFixture(t, adminOptions{fs: disk})
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-disk.released:
		default:
			close(disk.released)
		}
	})
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"order":"A-1","lines":[1,2,3]}`
	io.WriteString(c, "POST /flows/acme/echo/enqueue HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer "+keyAcmeAll+
		"\r\nX-Correlation-ID: hangup-1\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	select {
	case <-disk.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the append never reached its sync")
	}
	c.Close() // the caller hangs up while its message syncs
	close(disk.released)

	queued := fx.waitLogEvents(t, "queue_enqueued", 1)
	processed := fx.waitLogEvents(t, "queue_processed", 1)
	type line struct {
		CorrelationID string
		MsgID         float64
	}
	pick := func(evs []map[string]any) []line {
		var out []line
		for _, e := range evs {
			id, _ := e["correlation_id"].(string)
			n, _ := e["msg_id"].(float64)
			out = append(out, line{id, n})
		}
		return out
	}
	want := []line{{"hangup-1", 1}}
	if diff := cmp.Diff(want, pick(queued)); diff != "" {
		t.Errorf("queue_enqueued lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, pick(processed)); diff != "" {
		t.Errorf("queue_processed lines: the message appended for a caller who hung up (-want +got):\n%s", diff)
	}
	if len(processed) == 1 && processed[0]["outcome"] != "succeeded" {
		t.Errorf("the delivery: %v, want it succeeded (the message whole)", processed[0])
	}
	if n := len(fx.logs.Events(t, "queue_damage")); n != 0 {
		t.Errorf("%d queue_damage lines, want none", n)
	}
}
