package integration

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTransportNoticesAreLogLines: what net/http's client writes to Go's
// standard logger while a flow calls out (a backend that sends bytes after
// a 204, which the transport reports as an unsolicited response on an idle
// connection) is a line of the one JSON log, as every line on stderr is. It
// was written as Go's plain text ("2026/12/03 09:45:36 Unsolicited
// response …"), a line a log pipeline reading JSON could not read.
func TestTransportNoticesAreLogLines(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					// a 204 has no body: what follows it is unsolicited
					c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n{\"late\":true}"))
				}
			}()
		}
	}()
	forward := "---\nflowmarkdown_version: \"0.1\"\nflow: forward\ntenant: acme\neffects: [http_egress]\n---\n\n" +
		"## Step: forward\neffects: [http_egress]\nendpoint: http://" + l.Addr().String() + "/ingest\nmethod: POST\n"
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":           accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/forward.md": forward,
	})
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	if r := h.run("acme", "forward", acmeKey, `{"orderId":"A-1"}`); r.status != http.StatusOK {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var notice string
		for _, line := range h.logLines() {
			if strings.Contains(line, "Unsolicited response") {
				notice = line
			}
		}
		if notice != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("net/http reported no unsolicited response within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range h.logLines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("a line on stderr is not JSON: %s", line)
		}
	}
}
