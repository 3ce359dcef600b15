package host

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The management UI's session: /ui/login checks the admin key once and
// sets a cookie that any process sharing the key accepts (no server-side
// state, so it works behind a load balancer), valid for sessionTTL. Its
// value is "v1.EXPIRY.MAC", MAC an HMAC-SHA256 keyed with the admin key:
// changing the key ends every session. The cookie is HttpOnly and
// SameSite=Strict; the UI's forms also carry a token derived from it
// (csrfToken), so a cross-site POST cannot act with it.

const (
	sessionCookie = "nexus_session"
	sessionTTL    = 12 * time.Hour
)

func (s *Server) sessionMAC(msg string) string {
	m := hmac.New(sha256.New, []byte(s.cfg.AdminKey))
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie's value, valid until now+sessionTTL.
func (s *Server) newSession(now time.Time) string {
	payload := "v1." + strconv.FormatInt(now.Add(sessionTTL).Unix(), 10)
	return payload + "." + s.sessionMAC("nexus ui session|"+payload)
}

// validSession reports whether v is a session this admin key made and
// that has not expired.
func (s *Server) validSession(v string, now time.Time) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !strings.HasPrefix(v, "v1.") {
		return false
	}
	payload, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(s.sessionMAC("nexus ui session|"+payload))) {
		return false
	}
	exp, err := strconv.ParseInt(payload[len("v1."):], 10, 64)
	return err == nil && now.Unix() < exp
}

// csrfToken is the token the UI's forms carry for a session.
func (s *Server) csrfToken(session string) string {
	return s.sessionMAC("nexus ui csrf|" + session)
}

// adminAuth says how a request to /ui/ or /api/ proved the admin key.
type adminAuth int

const (
	authNone    adminAuth = iota
	authBearer            // Authorization: Bearer ADMIN_KEY
	authSession           // the session cookie
)

// String names the way, for logs.
func (a adminAuth) String() string {
	switch a {
	case authBearer:
		return "bearer"
	case authSession:
		return "session"
	}
	return "none"
}

// isAdminKey reports whether key is the admin key. The SHA-256 sums are
// compared, so that the time taken does not tell the key's length either
// (subtle.ConstantTimeCompare returns at once on two lengths).
func (s *Server) isAdminKey(key string) bool {
	given, want := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(s.cfg.AdminKey))
	return s.cfg.AdminKey != "" && subtle.ConstantTimeCompare(given[:], want[:]) == 1
}

func (s *Server) adminAuth(r *http.Request) (adminAuth, string) {
	if key, ok := bearer(r); ok {
		if s.isAdminKey(key) {
			return authBearer, ""
		}
		return authNone, ""
	}
	if c, err := r.Cookie(sessionCookie); err == nil && s.validSession(c.Value, s.cfg.Now()) {
		return authSession, c.Value
	}
	return authNone, ""
}

// maxFormBytes bounds the body of a UI or API POST: a form of a token and
// a key, read before the token is checked.
const maxFormBytes = 64 << 10

// authorize begins every request to /ui/ and /api/ (but the login form):
// the correlation ID, the bound on a POST's body, and how the request
// proved the admin key, with the session's value when by the cookie.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (adminAuth, string) {
	correlationID(w, r)
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	return s.adminAuth(r)
}

// authorizeForm is authorize, and for a POST made with the session
// cookie whether it came from the UI's own pages (originOK for any other
// request).
func (s *Server) authorizeForm(w http.ResponseWriter, r *http.Request) (adminAuth, string, originRefusal) {
	auth, session := s.authorize(w, r)
	if r.Method != http.MethodPost || auth != authSession {
		return auth, session, originOK
	}
	return auth, session, s.crossOrigin(r, session)
}

// originRefusal is why a state-changing request made with the session
// cookie is refused (originOK: it is not).
type originRefusal int

const (
	originOK        originRefusal = iota
	originOtherSite               // the browser says it came from another site
	originTooLarge                // its form is over maxFormBytes, so its token cannot be read
	originNoToken                 // its form token is missing or not the session's
)

// crossOrigin says whether a state-changing request made with the
// session cookie came from the UI's own pages (originOK): its form token
// matches the session, and the browser does not say it came from another
// site. Otherwise it says why not, for an answer that helps.
func (s *Server) crossOrigin(r *http.Request, session string) originRefusal {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return originOtherSite
	}
	var err error
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		err = r.ParseMultipartForm(maxFormBytes) // which ParseForm leaves unread
	} else {
		err = r.ParseForm()
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return originTooLarge
	}
	token := r.PostFormValue("csrf")
	if token == "" || !hmac.Equal([]byte(token), []byte(s.csrfToken(session))) {
		return originNoToken
	}
	return originOK
}

// setSession sets (or, with an empty value, clears) the session cookie.
func setSession(w http.ResponseWriter, r *http.Request, value string, expires time.Time) {
	c := &http.Cookie{Name: sessionCookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	http.SetCookie(w, c)
}
