package host_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestUISessionOverTLS logs in over a real TLS connection: the session
// cookie is Secure, HttpOnly and SameSite=Strict, a browser's jar sends it
// back over TLS only, and logging out clears it with the same flags.
func TestUISessionOverTLS(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	srv := httptest.NewTLSServer(fx.handler)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	resp, err := client.PostForm(srv.URL+"/ui/login", url.Values{"key": {adminKey}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	session := cookieNamed(resp, "nexus_session")
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		t.Fatalf("login over TLS: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	if !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" {
		t.Errorf("the session cookie over TLS: %q, want Secure; HttpOnly; SameSite=Strict; Path=/", resp.Header.Get("Set-Cookie"))
	}

	// a browser's jar holds a Secure cookie back from plain HTTP
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	jar.SetCookies(u, []*http.Cookie{session})
	if got := jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/ui/"}); len(got) != 0 {
		t.Errorf("the jar sends %v over plain HTTP", got)
	}

	// the page's token, then logout over TLS
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	_, err = io.Copy(&page, resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/ over TLS with the cookie: %d", resp.StatusCode)
	}
	token := csrfOf(t, page.String())
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/ui/logout", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	gone := cookieNamed(resp, "nexus_session")
	if resp.StatusCode != http.StatusSeeOther || gone == nil || gone.Value != "" || gone.MaxAge >= 0 || !gone.Secure || !gone.HttpOnly {
		t.Errorf("logout over TLS: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}

// cookieNamed is the cookie named name that resp sets, nil when none.
func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}
