package transport

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// HTTPAuth is what an HTTP listener of a node (the dashboard and
// /metrics) asks of clients when it is bound beyond loopback: the cluster
// token as a bearer token (Prometheus' authorization or bearer_token), or
// basic auth, with User and Password when set, or else any user name and
// the token as the password (what a browser prompts for).
type HTTPAuth struct {
	Token          string
	User, Password string
}

// ErrOpenHTTP: an HTTP listener beyond loopback was given no credential
// to require.
var ErrOpenHTTP = errors.New("an HTTP listener beyond loopback needs the cluster token or basic auth")

// Guard returns h behind a's authentication when the listener's address
// bound is not a loopback one; on loopback h is returned as is (anyone
// who can reach it is on the host). A request without the credential, or
// with a wrong one, gets 401 and is counted and logged at a rate limit
// like a refused connection, before h sees it.
func (a HTTPAuth) Guard(h http.Handler, bound net.Addr) (http.Handler, error) {
	if IsLoopback(bound) {
		return h, nil
	}
	if a.Token == "" && (a.User == "" || a.Password == "") {
		return nil, fmt.Errorf("%s: %w", bound, ErrOpenHTTP)
	}
	g := &guard{next: h, hasToken: a.Token != "", hasBasic: a.User != "" && a.Password != ""}
	g.token = sha256.Sum256([]byte(a.Token))
	g.user, g.pass = sha256.Sum256([]byte(a.User)), sha256.Sum256([]byte(a.Password))
	return g, nil
}

// IsLoopback reports whether addr is a TCP address on a loopback IP (an
// unspecified address, 0.0.0.0 or ::, is not) or a Unix socket.
func IsLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type guard struct {
	next               http.Handler
	hasToken, hasBasic bool
	token, user, pass  [sha256.Size]byte // SHA-256 of each, compared in constant time
}

func eq(sum [sha256.Size]byte, s string) bool {
	got := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(got[:], sum[:]) == 1
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ok, given := false, false
	if v := r.Header.Get("Authorization"); v != "" {
		given = true
		if tok, found := strings.CutPrefix(v, "Bearer "); found {
			ok = g.hasToken && eq(g.token, tok)
		} else if user, pass, found := r.BasicAuth(); found {
			userOK, passOK := eq(g.user, user), eq(g.pass, pass)
			ok = (g.hasBasic && userOK && passOK) || (g.hasToken && eq(g.token, pass))
		}
	}
	if ok {
		g.next.ServeHTTP(w, r)
		return
	}
	why := refusedNoToken
	if given {
		why = refusedBadToken
	}
	refused(why, httpAddr(r.RemoteAddr), fmt.Errorf("%w: HTTP %s %s", ErrUnauthenticated, r.Method, r.URL.Path))
	w.Header().Set("WWW-Authenticate", `Basic realm="troupe", charset="UTF-8"`)
	http.Error(w, "unauthorized: send the cluster token (Authorization: Bearer TOKEN, or basic auth with the token as the password)", http.StatusUnauthorized)
}

// httpAddr is a request's remote address as a net.Addr for the log.
type httpAddr string

func (a httpAddr) Network() string { return "tcp" }
func (a httpAddr) String() string  { return string(a) }
