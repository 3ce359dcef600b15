package host_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// The management UI, as a browser meets it: damaged dead letters shown,
// an HTML page for every answer under /ui/, and a button that keeps its
// page.

// frameOffsets are the offsets of the frames of a queue file (a 12-byte
// header, its bytes 4 to 8 the record's length, then the record).
func frameOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for off := 0; off+12 <= len(b); off += 12 + int(binary.BigEndian.Uint32(b[off+4:off+8])) {
		out = append(out, int64(off))
	}
	return out
}

// flipByte inverts the last byte of the record of path's frame that
// starts at off and ends at end: its checksum no longer verifies.
func flipByte(t *testing.T, path string, end int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[end-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dlqDoc is GET /api/queues/{tenant}/{flow}/dlq.
type dlqDoc struct {
	Total       int `json:"total"`
	DeadLetters []struct {
		ID uint64 `json:"id"`
	} `json:"dead_letters"`
	Damaged      []damageDoc `json:"damaged"`
	DamagedTotal int         `json:"damaged_total"`
}

type damageDoc struct {
	File    string  `json:"file"`
	Offset  int64   `json:"offset"`
	Length  int64   `json:"length"`
	ID      *uint64 `json:"id"`
	Reason  string  `json:"reason"`
	Message string  `json:"message"`
}

// A dead letter of dlq.log that fails its check, or a mark of
// dlq.log.acked that does, is reported by nexus dlq list; the Queue page
// and the API's listing report it too, in the CLI's words, where they
// reported nothing. A torn tail (a write in progress) is not damage, as
// for the CLI.
func TestDamagedDeadLettersAreShown(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`, `{"n":3}`)
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`, `{"n":2}`, `{"n":3}`)
	c := fx.login(t)

	// wantDamage checks the page and the API against what the CLI reads
	check := func(t *testing.T, flowName, file string, wantIDs []uint64) {
		t.Helper()
		ids, damage, err := queue.ReadDeadLetters(fx.root, "acme", flowName, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(damage) != 1 || damage[0].File != file {
			t.Fatalf("the CLI reads damage %v, want one in %s", damage, file)
		}
		if len(ids) != len(wantIDs) {
			t.Fatalf("the CLI lists %d dead letters, want %d", len(ids), len(wantIDs))
		}
		d := damage[0]
		msg := d.DeadLetterText() // what nexus dlq list prints after "T/F: "

		body := wantPage(t, fx.get("/ui/queues/acme/"+flowName, c), http.StatusOK)
		box := regexp.MustCompile(`(?s)<div class="error" id="damaged" role="alert">(.*?)</div>`).FindStringSubmatch(body)
		if box == nil {
			t.Fatalf("the page shows no damage:\n%s", body)
		}
		if !strings.Contains(box[1], "<code>"+html.EscapeString(msg)+"</code>") {
			t.Errorf("the damage box does not say %q:\n%s", msg, box[1])
		}
		var rows []uint64
		for _, m := range idRow.FindAllStringSubmatch(body, -1) {
			var id uint64
			fmt.Sscan(m[1], &id)
			rows = append(rows, id)
		}
		if !slices.Equal(rows, wantIDs) {
			t.Errorf("rows %v, want %v", rows, wantIDs)
		}

		w := fx.admin(http.MethodGet, "/api/queues/acme/"+flowName+"/dlq")
		if w.Code != http.StatusOK {
			t.Fatalf("API: %d %s", w.Code, w.Body)
		}
		var doc dlqDoc
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		var id *uint64
		if d.ID != 0 {
			id = &d.ID
		}
		want := []damageDoc{{File: d.File, Offset: d.Offset, Length: d.Length, ID: id, Reason: d.Reason, Message: msg}}
		if diff := cmp.Diff(want, doc.Damaged); diff != "" {
			t.Errorf("API damaged (-want +got):\n%s", diff)
		}
		if doc.DamagedTotal != 1 {
			t.Errorf("API: damaged_total %d, want 1", doc.DamagedTotal)
		}
		if doc.Total != len(wantIDs) || len(doc.DeadLetters) != len(wantIDs) {
			t.Errorf("API: total %d, %d dead letters; want %d", doc.Total, len(doc.DeadLetters), len(wantIDs))
		}
		// the existing keys as they were, "damaged" then "damaged_total"
		// after them
		keys := keyOrder(w.Body.Bytes())
		if len(keys) < 9 || !slices.Equal(keys[:7], []string{"tenant", "flow", "total", "next_after", "prev_after", "last_after", "dead_letters"}) || keys[len(keys)-8] != "damaged" || keys[len(keys)-1] != "damaged_total" {
			t.Errorf("API keys %q", keys)
		}
	}

	t.Run("a damaged dead letter", func(t *testing.T) {
		path := filepath.Join(fx.root, "acme", "echo", "dlq.log")
		offs := frameOffsets(t, path)
		if len(offs) != 3 {
			t.Fatalf("dlq.log has %d frames", len(offs))
		}
		flipByte(t, path, offs[2]) // the last byte of the second frame
		check(t, "echo", "dlq.log", []uint64{1, 3})
		// the overview says so too, with the way to the Queue page's list
		var qs queuesDoc
		if w := fx.admin(http.MethodGet, "/api/queues"); json.Unmarshal(w.Body.Bytes(), &qs) != nil {
			t.Fatalf("/api/queues: %s", w.Body)
		}
		for _, q := range qs.Queues {
			if want := map[bool]int{true: 1}[q.Flow == "echo"]; q.DamagedDeadLetters != want {
				t.Errorf("/api/queues: %s/%s has %d damaged dead letters, want %d", q.Tenant, q.Flow, q.DamagedDeadLetters, want)
			}
		}
		if body := wantPage(t, fx.get("/ui/queues", c), http.StatusOK); !strings.Contains(body,
			`<td class="n">2 <a class="error" href="/ui/queues/acme/echo#damaged">+1 damaged</a></td>`) {
			t.Errorf("the Queues page does not show the damaged dead letter:\n%s", body)
		}
	})

	t.Run("a damaged mark", func(t *testing.T) {
		for _, id := range []string{"1", "2"} {
			if w := fx.admin(http.MethodPost, "/api/queues/acme/gone/dlq/"+id+"/discard"); w.Code != http.StatusOK {
				t.Fatalf("discard %s: %d %s", id, w.Code, w.Body)
			}
		}
		path := filepath.Join(fx.root, "acme", "gone", "dlq.log.acked")
		offs := frameOffsets(t, path)
		if len(offs) != 2 {
			t.Fatalf("dlq.log.acked has %d frames", len(offs))
		}
		flipByte(t, path, offs[1]) // the first mark, of id 1
		check(t, "gone", "dlq.log.acked", []uint64{1, 3})
	})

	t.Run("no damage, or a torn tail", func(t *testing.T) {
		seedDeadLetters(t, fx.root, "acme", "fine", `{"n":1}`)
		path := filepath.Join(fx.root, "acme", "fine", "dlq.log")
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("NXQ1\x00\x00")) // a frame cut short
		f.Close()
		body := wantPage(t, fx.get("/ui/queues/acme/fine", c), http.StatusOK)
		if strings.Contains(body, `id="damaged"`) || !strings.Contains(body, `<tr data-id="1">`) {
			t.Errorf("the page:\n%s", body)
		}
		// the API's listing is as before: no "damaged" key
		wantDocument(t, fx.admin(http.MethodGet, "/api/queues/acme/fine/dlq?after=1"),
			`{"tenant":"acme","flow":"fine","total":1,"next_after":null,"prev_after":0,"last_after":null,"dead_letters":[]}`)
	})
}

// Under /ui/, a browser gets an HTML page with the right status and a
// one-line message, in the UI's layout, where it got the API's JSON: a
// stale payload link (the dead letter no longer pending), a bad one, an
// unknown path, a method a page does not take. The API keeps its JSON.
func TestUIAnswersArePages(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	big := `{"big":"` + strings.Repeat("x", 5000) + `"}`
	seedDeadLetters(t, fx.root, "acme", "echo", big, `{"n":2}`)
	c := fx.login(t)
	body := wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK)
	token := csrfOf(t, body)
	link := "/ui/queues/acme/echo/dlq/1/payload"
	if !strings.Contains(body, `<a href="`+link+`" download>`) {
		t.Fatalf("no download link in:\n%s", body)
	}
	if w := fx.get(link, c); w.Code != http.StatusOK || w.Body.String() != big {
		t.Fatalf("the download: %d %.100s", w.Code, w.Body)
	}
	if w := fx.post("/ui/queues/acme/echo/dlq/1/discard", c, url.Values{"csrf": {token}}); w.Code != http.StatusSeeOther {
		t.Fatalf("discard: %d %s", w.Code, w.Body)
	}

	const (
		session = iota
		bearer
		none
	)
	for _, tc := range []struct {
		name, method, path string
		auth               int
		status             int
		msg, allow, back   string
	}{
		{"a stale payload link", "GET", link, session, 404, "no pending dead letter id=1 tenant=acme flow=echo", "", "/ui/queues/acme/echo"},
		{"a stale payload link with the bearer key", "GET", link, bearer, 404, "no pending dead letter id=1 tenant=acme flow=echo", "", "/ui/queues/acme/echo"},
		{"a payload link with a bad id", "GET", "/ui/queues/acme/echo/dlq/x/payload", session, 400, `&#34;x&#34; is not a message id (a whole number from the dead letters&#39; list)`, "", "/ui/queues/acme/echo"},
		{"a payload link with a bad name", "GET", "/ui/queues/A/echo/dlq/2/payload", session, 400, `invalid name &#34;A&#34; for tenant (flow &#34;echo&#34;): character &#39;A&#39; at position 1 is not allowed`, "", ""},
		{"an unknown page", "GET", "/ui/nope", session, 404, "There is no page at /ui/nope.", "", ""},
		{"a path under a page", "GET", "/ui/queues/acme/echo/more", session, 404, "There is no page at /ui/queues/acme/echo/more.", "", ""},
		{"a dead letter's own path", "GET", "/ui/queues/acme/echo/dlq/2", bearer, 404, "There is no page at /ui/queues/acme/echo/dlq/2.", "", ""},
		{"a double slash", "GET", "/ui//queues", session, 404, "There is no page at /ui//queues.", "", ""},
		{"an encoded newline, named as sent", "GET", "/ui/a%0Ab", session, 404, `There is no page at /ui/a%0Ab.`, "", ""},
		{"an encoded slash", "GET", "/ui/queues%2Facme", session, 404, `There is no page at /ui/queues%2Facme.`, "", ""},
		{"GET of the logout", "GET", "/ui/logout", session, 405, "The page /ui/logout does not answer GET (it answers POST).", "POST", ""},
		{"GET of a button", "GET", "/ui/queues/acme/echo/dlq/2/discard", session, 405, "The page /ui/queues/acme/echo/dlq/2/discard does not answer GET (it answers POST).", "POST", ""},
		{"POST to a page", "POST", "/ui/queues", session, 405, "The page /ui/queues does not answer POST (it answers GET, HEAD).", "GET, HEAD", ""},
		{"PUT to a page", "PUT", "/ui/queues/acme/echo", bearer, 405, "The page /ui/queues/acme/echo does not answer PUT (it answers GET, HEAD).", "GET, HEAD", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *http.Request
			switch tc.auth {
			case session:
				r = newRequest(tc.method, tc.path, url.Values{"csrf": {token}}.Encode())
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.AddCookie(c)
			case bearer:
				r = newRequest(tc.method, tc.path, "", bearerAdmin...)
			default:
				r = newRequest(tc.method, tc.path, "")
			}
			w := fx.serve(r)
			body := wantPage(t, w, tc.status)
			m := errorLine.FindStringSubmatch(body)
			if m == nil || m[1] != tc.msg {
				t.Errorf("the page's message is %q, want %q:\n%s", m, tc.msg, body)
			}
			if got := w.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
			if tc.back != "" && !strings.Contains(body, `<a href="`+tc.back+`">Back to the queue</a>`) {
				t.Errorf("no link back to %s:\n%s", tc.back, body)
			}
			if !strings.Contains(body, `<a href="/ui/queues" class="on">`) && strings.Contains(tc.path, "/payload") {
				t.Errorf("the page is not in the Queues section:\n%s", body)
			}
		})
	}

	// without a session, a path that is no page is not told apart from
	// one that is: 401 and the way to the login form, as for any page
	for _, tc := range []struct{ method, path, next string }{
		{"GET", "/ui/nope", "%2Fui%2Fnope"},
		{"GET", "/ui/logout", "%2Fui%2Flogout"},
		{"POST", "/ui/queues", "%2Fui%2F"},
	} {
		w := fx.serve(newRequest(tc.method, tc.path, ""))
		body := wantPage(t, w, http.StatusUnauthorized)
		if want := `url=/ui/login?next=` + tc.next; !strings.Contains(body, want) || w.Header().Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s %s without a session: no %q, or no WWW-Authenticate:\n%s", tc.method, tc.path, want, body)
		}
	}

	// HEAD answers what GET does
	if w := fx.serve(newRequest(http.MethodHead, "/ui/nope", "", bearerAdmin...)); w.Code != http.StatusNotFound || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD /ui/nope: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	// the API keeps its JSON refusals
	wantRefusal(t, fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq/1/payload"), http.StatusNotFound, "no pending dead letter id=1 tenant=acme flow=echo")
	wantRefusal(t, fx.admin(http.MethodGet, "/api/nope"), http.StatusNotFound, "no such endpoint: GET /api/nope")
	// the session's pages still answer
	wantPage(t, fx.get("/ui/", c), http.StatusOK)
	wantPage(t, fx.get("/ui/login", nil), http.StatusOK)
}

// A Replay or Discard button sends the browser back to the page it was
// on (its after and limit), where it went back to the first; to the last
// page when its own lists nothing any more.
func TestUIButtonKeepsItsPage(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`)
	c := fx.login(t)
	rows := func(body string) []string {
		var ids []string
		for _, m := range idRow.FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	fields := regexp.MustCompile(`<input type="hidden" name="(\w+)" value="([^"]*)">`)
	// press posts the page's form for action on id, with its fields
	press := func(t *testing.T, page, id, action string) (string, string) {
		t.Helper()
		body := wantPage(t, fx.get(page, c), http.StatusOK)
		form := regexp.MustCompile(`<form method="post" action="/ui/queues/acme/echo/dlq/` + id + `/` + action + `">(.*?)</form>`).FindStringSubmatch(body)
		if form == nil {
			t.Fatalf("no %s button for %s on %s:\n%s", action, id, page, body)
		}
		v := url.Values{}
		for _, f := range fields.FindAllStringSubmatch(form[1], -1) {
			v.Set(f[1], html.UnescapeString(f[2]))
		}
		w := fx.post("/ui/queues/acme/echo/dlq/"+id+"/"+action, c, v)
		if w.Code != http.StatusSeeOther {
			t.Fatalf("%s %s: %d %s", action, id, w.Code, w.Body)
		}
		loc := w.Header().Get("Location")
		return loc, wantPage(t, fx.get(loc, c), http.StatusOK)
	}

	t.Run("discard on page 2", func(t *testing.T) {
		loc, body := press(t, "/ui/queues/acme/echo?after=2&limit=2", "3", "discard")
		if loc != "/ui/queues/acme/echo?discarded=3&after=2&limit=2" {
			t.Errorf("Location %q", loc)
		}
		if got := rows(body); !slices.Equal(got, []string{"4", "5"}) {
			t.Errorf("rows %v, want page 2: [4 5]", got)
		}
		if !strings.Contains(body, `<div class="notice" role="status">Dead letter 3 was discarded; its body leaves the disk at the queue&#39;s next drain.</div>`) {
			t.Errorf("no notice:\n%s", body)
		}
	})

	t.Run("replay on page 2", func(t *testing.T) {
		loc, body := press(t, "/ui/queues/acme/echo?after=2&limit=2", "4", "replay")
		if !regexp.MustCompile(`^/ui/queues/acme/echo\?replayed=4&as=\d+&after=2&limit=2$`).MatchString(loc) {
			t.Errorf("Location %q", loc)
		}
		if got := rows(body); !slices.Equal(got, []string{"5"}) {
			t.Errorf("rows %v, want [5]", got)
		}
	})

	t.Run("the last entry of the last page", func(t *testing.T) {
		// 1, 2 and 5 are left, 2 to a page: 5 alone on page 2
		loc, body := press(t, "/ui/queues/acme/echo?after=2&limit=2", "5", "discard")
		if loc != "/ui/queues/acme/echo?discarded=5&limit=2" {
			t.Errorf("Location %q, want the first page, the last one left", loc)
		}
		if got := rows(body); !slices.Equal(got, []string{"1", "2"}) {
			t.Errorf("rows %v, want [1 2]", got)
		}
	})

	t.Run("the last page after a page that empties", func(t *testing.T) {
		seedDeadLetters(t, fx.root, "acme", "many", "1", "2", "3", "4", "5", "6", "7")
		// pages of 3: 1-3, 4-6, 7; discarding 7 shows 4-6
		page := "/ui/queues/acme/many?after=6&limit=3"
		body := wantPage(t, fx.get(page, c), http.StatusOK)
		token := csrfOf(t, body)
		w := fx.post("/ui/queues/acme/many/dlq/7/discard", c, url.Values{"csrf": {token}, "after": {"6"}, "limit": {"3"}})
		if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/ui/queues/acme/many?discarded=7&after=3&limit=3" {
			t.Errorf("%d Location %q", w.Code, loc)
		}
		// a button that fails (a second click) shows the same bounded page
		body = wantPage(t, fx.post("/ui/queues/acme/many/dlq/7/discard", c, url.Values{"csrf": {token}, "after": {"6"}, "limit": {"3"}}), http.StatusNotFound)
		if got := rows(body); !slices.Equal(got, []string{"4", "5", "6"}) || !strings.Contains(body, "no pending dead letter id=7 tenant=acme flow=many") {
			t.Errorf("rows %v, want [4 5 6], with the error:\n%s", got, body)
		}
		// its buttons keep that page
		if !strings.Contains(body, `<input type="hidden" name="after" value="3"><input type="hidden" name="limit" value="3">`) {
			t.Errorf("the buttons do not carry the page:\n%s", body)
		}
	})

	t.Run("a page past the last", func(t *testing.T) {
		body := wantPage(t, fx.get("/ui/queues/acme/many?after=99&limit=3", c), http.StatusOK)
		if !strings.Contains(body, "No pending dead letter comes after id 99: see the first page.") || strings.Contains(body, "DLQ is empty") {
			t.Errorf("a page past the last does not say so:\n%s", body)
		}
	})

	t.Run("the first page at the default size", func(t *testing.T) {
		loc, _ := press(t, "/ui/queues/acme/echo", "1", "discard")
		if loc != "/ui/queues/acme/echo?discarded=1" {
			t.Errorf("Location %q", loc)
		}
	})

	t.Run("fields that are not a page's", func(t *testing.T) {
		body := wantPage(t, fx.get("/ui/queues/acme/many", c), http.StatusOK)
		w := fx.post("/ui/queues/acme/many/dlq/1/discard", c, url.Values{"csrf": {csrfOf(t, body)}, "after": {"x"}, "limit": {"9999"}})
		if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/ui/queues/acme/many?discarded=1" {
			t.Errorf("%d Location %q, want the first page", w.Code, loc)
		}
	})

	t.Run("replay all keeps the page size", func(t *testing.T) {
		// echo, live, has dead letter 2 left
		page := "/ui/queues/acme/echo?limit=1"
		body := wantPage(t, fx.get(page, c), http.StatusOK)
		form := regexp.MustCompile(`<form method="post" action="/ui/queues/acme/echo/dlq/all/replay" id="replay-all">(.*?)</form>`).FindStringSubmatch(body)
		if form == nil {
			t.Fatalf("no Replay all button on %s:\n%s", page, body)
		}
		v := url.Values{}
		for _, f := range fields.FindAllStringSubmatch(form[1], -1) {
			v.Set(f[1], html.UnescapeString(f[2]))
		}
		w := fx.post("/ui/queues/acme/echo/dlq/all/replay", c, v)
		if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/ui/queues/acme/echo?replay_all=1&limit=1" {
			t.Errorf("Replay all: %d Location %q, want the first page (none left) at 1 a page", w.Code, loc)
		}
	})
}

// A dlq.log damaged wholesale (a disk error, a torn copy: every other
// frame here) is listed by its first queue.PageDamage damaged frames, in
// file order, and counted whole: the API's damaged_total, the Queue page's
// count and its "and K more". Every page listed all of them.
func TestManyDamagedDeadLettersAreCapped(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	const n = queue.PageDamage + 50 // damaged frames
	payloads := make([]string, 2*n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n":%d}`, i+1)
	}
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	path := filepath.Join(fx.root, "acme", "echo", "dlq.log")
	offs := append(frameOffsets(t, path), fileLen(t, path))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*n; i += 2 {
		b[offs[i+1]-1] ^= 0xff // the last byte of every other frame, from the first
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, damage, err := queue.ReadDeadLetters(fx.root, "acme", "echo", nil)
	if err != nil || len(damage) != n {
		t.Fatalf("the CLI reads %d damaged frames, %v; want %d", len(damage), err, n)
	}

	w := fx.admin(http.MethodGet, "/api/queues/acme/echo/dlq?limit=10")
	if w.Code != http.StatusOK {
		t.Fatalf("API: %d %s", w.Code, w.Body)
	}
	var doc dlqDoc
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var want []damageDoc
	for _, d := range damage[:queue.PageDamage] {
		id := d.ID
		want = append(want, damageDoc{File: d.File, Offset: d.Offset, Length: d.Length, ID: &id, Reason: d.Reason, Message: d.DeadLetterText()})
	}
	if diff := cmp.Diff(want, doc.Damaged); diff != "" {
		t.Errorf("API damaged (-want +got):\n%s", diff)
	}
	if doc.DamagedTotal != n || doc.Total != n || len(doc.DeadLetters) != 10 {
		t.Errorf("API: damaged_total %d, total %d, %d dead letters; want %d, %d, 10", doc.DamagedTotal, doc.Total, len(doc.DeadLetters), n, n)
	}
	if keys := keyOrder(w.Body.Bytes()); keys[len(keys)-1] != "damaged_total" {
		t.Errorf("API keys end with %q: damaged_total is not the last", keys[len(keys)-3:])
	}

	body := wantPage(t, fx.get("/ui/queues/acme/echo", fx.login(t)), http.StatusOK)
	box := regexp.MustCompile(`(?s)<div class="error" id="damaged" role="alert">(.*?)</div>`).FindStringSubmatch(body)
	if box == nil {
		t.Fatalf("the page shows no damage:\n%s", body)
	}
	head, _, _ := strings.Cut(box[1], "<ul>")
	if want := fmt.Sprintf("hold %d damaged entries", n); !strings.Contains(head, want) {
		t.Errorf("the damage box begins %q, want it to say %q", head, want)
	}
	if got := strings.Count(box[1], "<li "); got != queue.PageDamage {
		t.Errorf("the damage box lists %d entries, want %d", got, queue.PageDamage)
	}
	_, tail, _ := strings.Cut(box[1], "</ul>")
	if want := fmt.Sprintf(`<p id="damaged-more">and %d more: <code>nexus dlq list</code> names them all.</p>`, n-queue.PageDamage); !strings.Contains(tail, want) {
		t.Errorf("the damage box ends %q, want %q", tail, want)
	}
}

// fileLen is the size of the file at path.
func fileLen(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
