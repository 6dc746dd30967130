package transport

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestHTTPGuard: beyond loopback, only the token (bearer, or as the
// basic-auth password) or the configured basic auth reaches the handler;
// on loopback everything does; and beyond loopback without a credential
// the listener is refused.
func TestHTTPGuard(t *testing.T) {
	var served atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })
	wide := &net.TCPAddr{IP: net.IPv4zero, Port: 8265}
	if _, err := (HTTPAuth{}).Guard(h, wide); !errors.Is(err, ErrOpenHTTP) {
		t.Fatalf("open guard beyond loopback: %v, want ErrOpenHTTP", err)
	}
	if g, err := (HTTPAuth{}).Guard(h, &net.TCPAddr{IP: net.IPv6loopback}); err != nil || g == nil {
		t.Fatalf("loopback: %v", err)
	}
	g, err := HTTPAuth{Token: "tok", User: "ops", Password: "pw"}.Guard(h, wide)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		set  func(r *http.Request)
		ok   bool
	}{
		{"nothing", func(r *http.Request) {}, false},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, false},
		{"empty bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, false},
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }, true},
		{"basic with the token", func(r *http.Request) { r.SetBasicAuth("anyone", "tok") }, true},
		{"basic user and password", func(r *http.Request) { r.SetBasicAuth("ops", "pw") }, true},
		{"basic wrong password", func(r *http.Request) { r.SetBasicAuth("ops", "tok2") }, false},
		{"basic wrong user", func(r *http.Request) { r.SetBasicAuth("root", "pw") }, false},
		{"garbage", func(r *http.Request) { r.Header.Set("Authorization", "Basic !!!") }, false},
	}
	for _, tc := range cases {
		before := served.Load()
		r := httptest.NewRequest("GET", "/metrics", nil)
		tc.set(r)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, r)
		ran := served.Load() != before
		if ran != tc.ok || (rec.Code == http.StatusUnauthorized) == tc.ok {
			t.Errorf("%s: status %d, handler ran %v; want ok=%v", tc.name, rec.Code, ran, tc.ok)
		}
		if !tc.ok && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
}
