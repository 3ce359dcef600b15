package host

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// healthz answers 200 while the process runs.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	correlationID(w, r)
	closeUnread(w, r)
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`))
}

// readyz answers 200 once a live set is loaded (on a host that follows a
// repo, one holding a publication: starting), and 503 again once the
// shutdown has begun (Drain).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	correlationID(w, r)
	closeUnread(w, r)
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, shuttingDown)
		return
	}
	if why := s.starting(s.cfg.Live.Live()); why != "" {
		writeError(w, http.StatusServiceUnavailable, why)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`))
}

// starting says why the host cannot serve live yet, "" once it can: no
// live set loaded, or, on a host that awaits its repo's first
// publication, a live set of a registry that never had one.
func (s *Server) starting(live *registry.LiveSet) string {
	switch {
	case live == nil:
		return "the host is starting: no live set yet"
	case s.cfg.AwaitFirstPublication && live.Generation() == 0:
		return "the host is starting: the repo's first sync has not published yet"
	}
	return ""
}

// admin checks the admin key of /status (registered only on a host that
// has one).
func (s *Server) admin(w http.ResponseWriter, r *http.Request) bool {
	correlationID(w, r)
	closeUnread(w, r) // a GET's body is not read, with the key or without
	key, ok := bearer(r)
	if !ok || !s.isAdminKey(key) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, "missing or unknown admin key")
		return false
	}
	return true
}

// status answers what is deployed:
// {"commit":…,"synced_at":…,"flows":N,"last_error":null|{"commit":…,"errors":[…]},
// "sync_error":null|{…},"access_error":null|"…","generation":G,"schedules":[…]}.
func (s *Server) status(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	// the refusals too: the answer holds a refused commit's errors
	w.Header().Set("Cache-Control", "no-store")
	if !s.admin(w, r) {
		return
	}
	st, err := s.cfg.Status.Status(r.Context())
	if err != nil {
		s.internalError(w, r, fmt.Errorf("the status could not be read: %w", err))
		return
	}
	str := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	syncedAt := any(nil)
	if !st.SyncedAt.IsZero() {
		syncedAt = st.SyncedAt.UTC().Format(time.RFC3339)
	}
	lastError := any(nil)
	if le := st.LastError; le != nil {
		errs := make([]any, len(le.Errors))
		for i, e := range le.Errors {
			errs[i] = e
		}
		lastError = flow.NewObject([]string{"commit", "errors"}, []any{le.Commit, errs})
	}
	var schedules []any
	accessErr := any(nil)
	if live := s.cfg.Live.Live(); live != nil {
		if err := live.AccessErr(); err != nil {
			accessErr = err.Error()
		}
		// the set this process serves, which may trail the registry's by
		// the moment between a publication and its swap: its commit,
		// flows and generation together, never one set's commit with
		// another's count
		st.Commit, st.Flows, st.Generation = live.Commit(), len(live.Flows()), live.Generation()
		for _, sc := range live.Schedules(s.cfg.Now(), s.cfg.NextTick) {
			schedules = append(schedules, flow.NewObject(
				[]string{"tenant", "flow", "schedule", "zone", "next", "next_local"},
				[]any{sc.Tenant, sc.Flow, sc.Spec, sc.Zone, sc.Next.UTC().Format(time.RFC3339), sc.Next.Format(time.RFC3339)},
			))
		}
	}
	if schedules == nil {
		schedules = []any{}
	}
	syncError := any(nil)
	if f := s.cfg.SyncHealth.failure(); f != nil {
		syncError = flow.NewObject([]string{"since", "failures", "error"}, []any{f.Since, f.Failures, f.Error})
	}
	// server.md's four keys first, in its order; what this host adds after
	doc := flow.NewObject(
		[]string{"commit", "synced_at", "flows", "last_error", "sync_error", "access_error", "generation", "schedules"},
		[]any{str(st.Commit), syncedAt, st.Flows, lastError, syncError, accessErr, int(st.Generation), schedules},
	)
	w.Header().Set("Content-Type", "application/json")
	w.Header()["X-Content-Type-Options"] = nosniff
	w.Write(flow.AppendJSON(nil, doc))
}

// maxWebhookBytes bounds a webhook's body: 25 MiB, above GitHub's own
// ceiling on a payload (25 MB), whatever --max-body-bytes says of the doors (a push of
// many commits is megabytes, and the body goes through the MACs as it
// arrives, never held).
const maxWebhookBytes = 25 << 20

// webhookTooLarge is the 413 of a webhook's body over maxWebhookBytes.
var webhookTooLarge = "the webhook body exceeds " + strconv.Itoa(maxWebhookBytes) + " bytes"

// hookGit triggers a sync at once: 202 {"sync":"started"}. With secrets
// configured it requires GitHub's X-Hub-Signature-256 over the body, one
// such header.
func (s *Server) hookGit(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	correlationID(w, r)
	if s.cfg.Sync == nil {
		refuseUnread(w, r, http.StatusNotFound, "no config repo is synced by this host (start it with --repo)")
		return
	}
	if len(s.cfg.Secrets) == 0 {
		// the body is of no use unsigned and is not read: the connection
		// closes after the 202, as after a refusal made before the body
		closeUnread(w, r)
	}
	if len(s.cfg.Secrets) > 0 {
		// the header first: an unsigned request is refused before a byte
		// of its body is read; the body then goes through the MACs as it
		// arrives, never buffered
		sigs := r.Header.Values("X-Hub-Signature-256")
		if len(sigs) > 1 {
			// which one counts is a proxy's choice, as for the doors'
			// X-Nexus-Signature: none does
			w.Header().Set("WWW-Authenticate", HubSignatureChallenge)
			refuseUnread(w, r, http.StatusUnauthorized, "more than one X-Hub-Signature-256 header: send one")
			return
		}
		sig, ok := parseHubSignature(r.Header.Get("X-Hub-Signature-256"))
		if !ok {
			w.Header().Set("WWW-Authenticate", HubSignatureChallenge)
			refuseUnread(w, r, http.StatusUnauthorized, "missing or invalid X-Hub-Signature-256")
			return
		}
		if r.ContentLength > maxWebhookBytes {
			// announced too large: refused unread, as the doors refuse a
			// Content-Length over their ceiling
			refuseUnread(w, r, http.StatusRequestEntityTooLarge, webhookTooLarge)
			return
		}
		macs := make([]hash.Hash, len(s.cfg.Secrets))
		writers := make([]io.Writer, len(macs))
		for i, secret := range s.cfg.Secrets {
			macs[i] = hmac.New(sha256.New, []byte(secret))
			writers[i] = macs[i]
		}
		_, err := io.Copy(io.MultiWriter(writers...), http.MaxBytesReader(w, r.Body, maxWebhookBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, webhookTooLarge)
			return
		case err != nil:
			// a broken chunked encoding, a connection cut short, a body
			// too slow: not one too large
			writeBodyError(w, err)
			return
		}
		if !slices.ContainsFunc(macs, func(mac hash.Hash) bool { return hmac.Equal(sig, mac.Sum(nil)) }) {
			w.Header().Set("WWW-Authenticate", HubSignatureChallenge)
			writeError(w, http.StatusUnauthorized, "missing or invalid X-Hub-Signature-256")
			return
		}
	}
	s.cfg.Sync.Trigger()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte(`{"sync":"started"}`))
}
