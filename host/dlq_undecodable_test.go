package host_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// undecodeFrames makes the first n dead letters of the dlq.log at path
// undecodable: each one's last error is said to be longer than its
// record, and the frame's checksum is made again, so the frame verifies
// (its CRC holds) and the dead letter is counted as pending but cannot
// be listed: it is reported as damage.
func undecodeFrames(t *testing.T, path string, n int) {
	t.Helper()
	offs := frameOffsets(t, path)
	if len(offs) < n {
		t.Fatalf("dlq.log has %d frames, want %d at least", len(offs), n)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, off := range offs[:n] {
		h := b[off : off+12]
		rec := b[off+12 : off+12+int64(binary.BigEndian.Uint32(h[4:8]))]
		binary.BigEndian.PutUint32(rec[29:33], uint32(len(rec))) // the last error's length, past the record
		binary.BigEndian.PutUint32(h[8:12], crc32.Update(crc32.Update(0, castagnoli, h[4:8]), castagnoli, rec))
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A run of dead letters that cannot be decoded (their frames verify, so
// they are counted), longer than a page, does not end the pages: the
// API's next_after and the Queue page's Next page link go on past it to
// the dead letters after it, and prev_after and last_after stay on the
// same pages. A page of undecodable ones only had next_after null and
// said "No pending dead letter comes after id N", and the dead letters
// after them could not be reached.
func TestUndecodableDeadLettersDoNotEndThePages(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	payloads := make([]string, 8)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n":%d}`, i+1)
	}
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	undecodeFrames(t, filepath.Join(fx.root, "acme", "echo", "dlq.log"), 5)
	dls, damage, err := queue.ReadDeadLetters(fx.root, "acme", "echo", nil)
	var ids []uint64
	for _, d := range dls {
		ids = append(ids, d.ID)
	}
	if err != nil || len(damage) != 5 || !cmp.Equal(ids, []uint64{6, 7, 8}) {
		t.Fatalf("the CLI reads %v, damage %v, %v; want 6 to 8 and 5 damaged", ids, damage, err)
	}
	srv := httptest.NewServer(fx.handler)
	defer srv.Close()
	cookie := fx.login(t)
	get := func(t *testing.T, path string, header ...string) string {
		t.Helper()
		res, body := sendWithCookie(t, srv, cookie, http.MethodGet, path, nil, header...)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
		}
		return body
	}

	type apiPage struct {
		After     uint64
		IDs       []uint64
		Total     int
		NextAfter *uint64
		PrevAfter *uint64
		LastAfter *uint64
	}
	u := func(n uint64) *uint64 { return &n }
	want := []apiPage{
		{After: 0, Total: 8, NextAfter: u(2), LastAfter: u(6)},
		{After: 2, Total: 8, NextAfter: u(4), PrevAfter: u(0), LastAfter: u(6)},
		{After: 4, IDs: []uint64{6}, Total: 8, NextAfter: u(6), PrevAfter: u(2), LastAfter: u(6)},
		{After: 6, IDs: []uint64{7, 8}, Total: 8, PrevAfter: u(4)},
	}

	t.Run("the API", func(t *testing.T) {
		var got []apiPage
		after := uint64(0)
		for range 10 {
			var doc struct {
				Total       int     `json:"total"`
				NextAfter   *uint64 `json:"next_after"`
				PrevAfter   *uint64 `json:"prev_after"`
				LastAfter   *uint64 `json:"last_after"`
				DeadLetters []struct {
					ID uint64 `json:"id"`
				} `json:"dead_letters"`
				Damaged []struct {
					ID      uint64 `json:"id"`
					Message string `json:"message"`
				} `json:"damaged"`
				DamagedTotal int `json:"damaged_total"`
			}
			body := get(t, fmt.Sprintf("/api/queues/acme/echo/dlq?after=%d&limit=2", after), bearerAdmin...)
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			// every page names the dead letters no page lists
			var damaged []uint64
			for _, d := range doc.Damaged {
				if !strings.Contains(d.Message, "is not listed: record cannot be decoded: ") {
					t.Errorf("after=%d: damaged %d says %q", after, d.ID, d.Message)
				}
				damaged = append(damaged, d.ID)
			}
			if !cmp.Equal(damaged, []uint64{1, 2, 3, 4, 5}) || doc.DamagedTotal != 5 {
				t.Errorf("after=%d: damaged %v, %d in all; want 1 to 5", after, damaged, doc.DamagedTotal)
			}
			p := apiPage{After: after, Total: doc.Total, NextAfter: doc.NextAfter, PrevAfter: doc.PrevAfter, LastAfter: doc.LastAfter}
			for _, d := range doc.DeadLetters {
				p.IDs = append(p.IDs, d.ID)
			}
			got = append(got, p)
			if doc.NextAfter == nil {
				break
			}
			after = *doc.NextAfter
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the API's pages (-want +got):\n%s", diff)
		}
	})

	t.Run("the UI", func(t *testing.T) {
		link := func(rel, text string) *regexp.Regexp {
			return regexp.MustCompile(`<a href="/ui/queues/acme/echo\?(?:after=(\d+)&amp;)?limit=2"` + rel + `>` + text + `</a>`)
		}
		next, prev, last := link(` rel="next"`, "Next page"), link(` rel="prev"`, "Previous page"), link("", "Last page")
		at := func(re *regexp.Regexp, body string) *uint64 {
			m := re.FindStringSubmatch(body)
			if m == nil {
				return nil
			}
			var n uint64
			fmt.Sscan("0"+m[1], &n)
			return &n
		}
		var got []apiPage
		page := "/ui/queues/acme/echo?limit=2"
		for range 10 {
			body := get(t, page)
			if strings.Contains(body, "No pending dead letter comes after") {
				t.Errorf("%s says no dead letter comes after it:\n%s", page, body)
			}
			if !strings.Contains(body, `id="damaged"`) || strings.Count(body, "is not listed: record cannot be decoded: ") != 5 {
				t.Errorf("%s does not name the 5 dead letters that cannot be decoded:\n%s", page, body)
			}
			var after uint64
			fmt.Sscanf(page, "/ui/queues/acme/echo?after=%d", &after)
			const unread = "No dead letter of this page can be read: see the next page."
			if said := strings.Contains(body, unread); said != (after < 4) {
				t.Errorf("%s: saying %q is %v, want %v", page, unread, said, after < 4)
			}
			p := apiPage{After: after, IDs: pageRows(body), Total: 8, NextAfter: at(next, body), PrevAfter: at(prev, body), LastAfter: at(last, body)}
			got = append(got, p)
			m := next.FindStringSubmatch(body)
			if m == nil {
				break
			}
			page = html.UnescapeString(strings.TrimPrefix(strings.TrimSuffix(m[0], `" rel="next">Next page</a>`), `<a href="`))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the Queue pages (-want +got):\n%s", diff)
		}
	})
}
