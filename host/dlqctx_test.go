package host_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A replay or discard through the management API whose request has ended
// (its client gone) before the action holds the queue's lock writes
// nothing: the dead letter stays pending, no admin_action is logged, and
// no internal_error either. It went through whatever its request said.
func TestAPIReplayAndDiscardStopWithTheRequest(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	for _, action := range []string{"replay", "discard"} {
		r := newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/2/"+action, "", bearerAdmin...)
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		w := fx.serve(r.WithContext(ctx))
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("%s with its request ended: %d %s, want 503", action, w.Code, w.Body)
		}
		if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2}) {
			t.Errorf("pending after a %s whose request ended: %v, want [1 2]", action, got)
		}
	}
	if evs := fx.logs.Events(t, "admin_action"); len(evs) != 0 {
		t.Errorf("admin_action lines: %v, want none", evs)
	}
	if evs := fx.logs.Events(t, "internal_error"); len(evs) != 0 {
		t.Errorf("internal_error lines: %v, want none", evs)
	}
}

// A replay or discard of every dead letter ("all") whose request has ended
// (its client gone) before the run begins writes nothing: 503, the dead
// letters stay pending, no admin_action, no internal_error. The run took
// no context, and went on whatever its request said.
func TestAPIReplayAndDiscardAllStopWithTheRequest(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	for _, action := range []string{"replay", "discard"} {
		r := newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/all/"+action, "", bearerAdmin...)
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		w := fx.serve(r.WithContext(ctx))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "nothing was written") {
			t.Errorf("%s all with its request ended: %d %s, want 503 saying nothing was written", action, w.Code, w.Body)
		}
		if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2}) {
			t.Errorf("pending after a %s all whose request ended: %v, want [1 2]", action, got)
		}
	}
	if evs := fx.logs.Events(t, "admin_action"); len(evs) != 0 {
		t.Errorf("admin_action lines: %v, want none", evs)
	}
	if evs := fx.logs.Events(t, "internal_error"); len(evs) != 0 {
		t.Errorf("internal_error lines: %v, want none", evs)
	}
}
