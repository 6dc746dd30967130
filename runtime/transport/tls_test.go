package transport

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport/transporttest"
)

// TestTLSMismatchErrors: a call whose connection fails because the sides
// disagree about TLS, or about the CA, fails Unavailable with an error
// that errors.Is and errors.As see through, and that names the address.
func TestTLSMismatchErrors(t *testing.T) {
	p, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	other, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr, _ := startEcho(t, Options{Security: Security{Token: "tok", Server: p.Server()}})
	plainAddr, _ := startEcho(t, Options{Security: Security{Token: "tok"}})

	t.Run("plaintext client, TLS node", func(t *testing.T) {
		_, err := call(t, tlsAddr, Options{Security: Security{Token: "tok"}}, &echoReq{Text: "hi"})
		if !errors.Is(err, ErrTLSRequired) || status.Code(err) != codes.Unavailable {
			t.Fatalf("err %v (code %v), want ErrTLSRequired and Unavailable", err, status.Code(err))
		}
		if !strings.Contains(err.Error(), tlsAddr) || !strings.Contains(err.Error(), "drop --insecure") {
			t.Errorf("err %v does not name the node and the fix", err)
		}
	})
	t.Run("TLS client, plaintext node", func(t *testing.T) {
		_, err := call(t, plainAddr, Options{Security: Security{Token: "tok", Client: p.Client()}}, &echoReq{Text: "hi"})
		if !errors.Is(err, ErrNotTLS) || status.Code(err) != codes.Unavailable {
			t.Fatalf("err %v (code %v), want ErrNotTLS and Unavailable", err, status.Code(err))
		}
		if !strings.Contains(err.Error(), plainAddr) {
			t.Errorf("err %v does not name the node", err)
		}
	})
	t.Run("TLS client trusting another CA", func(t *testing.T) {
		_, err := call(t, tlsAddr, Options{Security: Security{Token: "tok", Client: other.Client()}}, &echoReq{Text: "hi"})
		var uae x509.UnknownAuthorityError
		if !errors.As(err, &uae) || errors.Is(err, ErrNotTLS) {
			t.Fatalf("err %v, want an x509.UnknownAuthorityError", err)
		}
	})
	t.Run("matching sides", func(t *testing.T) {
		if _, err := call(t, tlsAddr, Options{Security: Security{Token: "tok", Client: p.Client()}}, &echoReq{Text: "hi"}); err != nil {
			t.Fatal(err)
		}
		if _, err := call(t, plainAddr, Options{Security: Security{Token: "tok"}}, &echoReq{Text: "hi"}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestHandshakeErrorExpired(t *testing.T) {
	err := HandshakeError("10.0.0.1:7370", x509.CertificateInvalidError{Reason: x509.Expired})
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "renew it") || errors.Is(err, ErrNotTLS) {
		t.Fatalf("err %v: want the x509 error and the advice to renew", err)
	}
}
