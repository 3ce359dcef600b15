package host_test

import (
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// openRecorder is the OS, noting the queues (tenant/flow, from the paths
// under root) whose files are opened through it.
type openRecorder struct {
	queue.OS
	root   string
	mu     sync.Mutex
	queues map[string]bool
}

func (o *openRecorder) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	if rel, err := filepath.Rel(o.root, name); err == nil {
		if parts := strings.Split(filepath.ToSlash(rel), "/"); len(parts) >= 3 {
			o.mu.Lock()
			o.queues[parts[0]+"/"+parts[1]] = true
			o.mu.Unlock()
		}
	}
	return o.OS.OpenFile(name, flag, perm)
}

// opened returns the queues whose files were opened since the last call,
// sorted, and forgets them.
func (o *openRecorder) opened() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := []string{}
	for q := range o.queues {
		out = append(out, q)
	}
	slices.Sort(out)
	o.queues = map[string]bool{}
	return out
}

// TestQueuesFilterBeforeCounting: GET /api/queues and the Queues page take
// the tenant and flow filters, and read the files of the queues they keep
// alone: every queue's files were read, then the answer filtered. The
// Queues page had no filters; it takes them as the Journal page does (an
// empty field is no filter, a name that breaks the rule a 400 page saying
// so, its form keeping what was typed).
func TestQueuesFilterBeforeCounting(t *testing.T) {
	disk := &openRecorder{queues: map[string]bool{}}
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	disk.root = fx.root
	seedTwoQueues(t, fx)
	seedDeadLetters(t, fx.root, "acme", "hello", `{"n":1}`)
	seedDeadLetters(t, fx.root, "globex", "hello", `{"n":1}`)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"acme/echo", "acme/hello", "globex/hello", "globex/shipment"}},
		{"tenant=acme", []string{"acme/echo", "acme/hello"}},
		{"flow=hello", []string{"acme/hello", "globex/hello"}},
		{"tenant=globex&flow=shipment", []string{"globex/shipment"}},
		{"tenant=nobody", []string{}},
	} {
		t.Run("api "+tc.query, func(t *testing.T) {
			disk.opened()
			got := []string{}
			for q := range listedQueuesQuery(t, fx, tc.query) {
				got = append(got, q)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("queues listed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, disk.opened()); diff != "" {
				t.Errorf("queues whose files were read (-want +got):\n%s", diff)
			}
		})
		t.Run("ui "+tc.query, func(t *testing.T) {
			disk.opened()
			body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues?"+tc.query), http.StatusOK)
			got := []string{}
			for _, m := range queueRow.FindAllStringSubmatch(body, -1) {
				got = append(got, m[1])
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("queues shown (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, disk.opened()); diff != "" {
				t.Errorf("queues whose files were read (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 && !strings.Contains(body, "No queue matches these filters.") {
				t.Errorf("the page does not say that no queue matches")
			}
		})
	}
	t.Run("ui: the form keeps the filters, an empty field is no filter", func(t *testing.T) {
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues?tenant=acme&flow="), http.StatusOK)
		for _, want := range []string{`<form method="get" action="/ui/queues">`, `name="tenant" value="acme"`, `name="flow" value=""`, `data-queue="acme/echo"`, `data-queue="acme/hello"`} {
			if !strings.Contains(body, want) {
				t.Errorf("the page does not hold %s", want)
			}
		}
	})
	for _, tc := range []struct{ query, want, form string }{
		{"tenant=Bad", `Invalid name &#34;Bad&#34; for tenant (any flow): character &#39;B&#39; at position 1 is not allowed.`, `name="tenant" value="Bad"`},
		{"tenant=acme&flow=a.b", `Invalid name &#34;a.b&#34; for flow (tenant &#34;acme&#34;): character &#39;.&#39; at position 2 is not allowed.`, `name="flow" value="a.b"`},
	} {
		t.Run("ui 400 for "+tc.query, func(t *testing.T) {
			disk.opened()
			body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues?"+tc.query), http.StatusBadRequest)
			for _, want := range []string{tc.want, tc.form, "Nothing is listed: correct the filters above."} {
				if !strings.Contains(body, want) {
					t.Errorf("the page does not hold %s:\n%.3000s", want, body)
				}
			}
			if rows := queueRow.FindAllString(body, -1); len(rows) != 0 {
				t.Errorf("the page lists %v", rows)
			}
			if got := disk.opened(); len(got) != 0 {
				t.Errorf("the files of %v were read", got)
			}
		})
	}
}
