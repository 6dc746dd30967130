package pki

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport"
)

// ServiceName is the gRPC service of the bootstrap.
const ServiceName = "troupe.PKI"

// PublicMethods are the methods a node answers without the token: only the
// CA step, which reveals the CA certificate (public) and a proof that
// leaks nothing of the token (an HMAC of a fresh nonce).
var PublicMethods = []string{"/" + ServiceName + "/CA"}

// nonceLen is the size of the requester's challenge.
const nonceLen = 32

// CARequest asks a node for the cluster CA, with a fresh random challenge.
type CARequest struct {
	Nonce []byte `msgpack:"nonce"`
}

// CAResponse carries the CA certificate (PEM) and the node's proof that it
// holds the token: HMAC-SHA256(proofKey(token), nonce ‖ SHA-256(CA DER)).
type CAResponse struct {
	CA    []byte `msgpack:"ca"`
	Proof []byte `msgpack:"proof"`
}

// SignRequest asks for a certificate: a CSR (DER) for the requester's own
// key. Server asks for the CA key as well (raft servers sign for others;
// they hold the token, which already grants everything).
type SignRequest struct {
	CSR    []byte `msgpack:"csr"`
	Server bool   `msgpack:"server,omitempty"`
}

// SignResponse is the signed certificate (PEM, leaf then CA), the CA (PEM),
// and, for servers, the CA key (PEM).
type SignResponse struct {
	Cert  []byte `msgpack:"cert"`
	CA    []byte `msgpack:"ca"`
	CAKey []byte `msgpack:"ca_key,omitempty"`
}

// proofKey derives the key of the CA proof from the token.
func proofKey(token string) []byte {
	k := sha256.Sum256([]byte("troupe-ca-proof:" + token))
	return k[:]
}

// Proof returns the proof that a holder of token vouches for the CA whose
// certificate is caDER, for the challenge nonce.
func Proof(token string, nonce, caDER []byte) []byte {
	sum := sha256.Sum256(caDER)
	h := hmac.New(sha256.New, proofKey(token))
	h.Write(nonce)
	h.Write(sum[:])
	return h.Sum(nil)
}

// VerifyCA checks a node's answer to the CA step: the certificate parses
// and is a CA valid now, the proof matches token and nonce, and, when pin
// is not empty, the CA's hash is pin. It returns the CA.
func VerifyCA(resp *CAResponse, token string, nonce []byte, pin string) (*CA, error) {
	ca, err := ParseCA(resp.CA, nil)
	if err != nil {
		return nil, fmt.Errorf("the node's CA: %w", err)
	}
	if !hmac.Equal(resp.Proof, Proof(token, nonce, ca.Cert.Raw)) {
		return nil, badProofError{}
	}
	if pin != "" && ca.Hash() != pin {
		return nil, fmt.Errorf("%w: the node's CA is %s, want %s (a node of another cluster, or someone in between)", ErrCAMismatch, ca.Hash(), pin)
	}
	if err := CheckValid(ca.Cert, time.Now()); err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	return ca, nil
}

// Server answers the bootstrap on a node.
type Server struct {
	Token string
	// Days is the validity of the certificates it signs (default
	// DefaultCertDays).
	Days int

	// mu guards ca.
	mu sync.Mutex
	ca *CA
	// Forward signs on another node when this one does not hold the CA key
	// (a worker node); nil: refuse.
	Forward func(ctx context.Context, req *SignRequest) (*SignResponse, error)
}

// SetCA sets the CA the server hands out and signs with.
func (s *Server) SetCA(ca *CA) {
	s.mu.Lock()
	s.ca = ca
	s.mu.Unlock()
}

func (s *Server) currentCA() *CA {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ca
}

func (s *Server) caStep(ctx context.Context, req *CARequest) (*CAResponse, error) {
	ca := s.currentCA()
	if ca == nil {
		return nil, transport.Status(codes.FailedPrecondition, errors.New("this node runs without TLS (--insecure)"))
	}
	if len(req.Nonce) != nonceLen {
		return nil, transport.Status(codes.InvalidArgument, fmt.Errorf("CA request: nonce of %d bytes, want %d", len(req.Nonce), nonceLen))
	}
	return &CAResponse{CA: ca.PEM, Proof: Proof(s.Token, req.Nonce, ca.Cert.Raw)}, nil
}

func (s *Server) sign(ctx context.Context, req *SignRequest) (*SignResponse, error) {
	ca := s.currentCA()
	if ca == nil {
		return nil, transport.Status(codes.FailedPrecondition, errors.New("this node runs without TLS (--insecure)"))
	}
	if ca.Key == nil {
		if s.Forward != nil {
			return s.Forward(ctx, req)
		}
		return nil, transport.Status(codes.FailedPrecondition, fmt.Errorf("%w: give the node its own --tls-cert and --tls-key", ErrNoCAKey))
	}
	days := s.Days
	if days <= 0 {
		days = DefaultCertDays
	}
	cert, err := ca.SignCSR(req.CSR, days)
	if err != nil {
		return nil, transport.Status(codes.InvalidArgument, err)
	}
	resp := &SignResponse{Cert: append(cert, ca.PEM...), CA: ca.PEM}
	if req.Server {
		if resp.CAKey, err = MarshalKeyPEM(ca.Key); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// ServiceDesc describes the bootstrap service; register it with the
// *Server as implementation, and list PublicMethods in the gRPC server's
// transport.Options.Public.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(ServiceName, "CA", (*Server).caStep),
		transport.UnaryMethod(ServiceName, "Sign", (*Server).sign),
	},
	Metadata: "troupe/runtime/pki/bootstrap.go",
}

// FetchCA asks the node at addr for the cluster CA and checks its answer
// (VerifyCA). The token is not sent; the connection is TLS, and the node's
// certificate chain must verify against the CA it vouched for.
func FetchCA(ctx context.Context, addr, token, pin string) (*CA, error) {
	nonce := make([]byte, nonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	var (
		mu   sync.Mutex
		peer []*x509.Certificate
	)
	// Nothing is trusted yet: the chain the node presents is checked below,
	// against the CA it proves.
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			peer = cs.PeerCertificates
			mu.Unlock()
			return nil
		}}
	cc, err := transport.Dial(addr, transport.Options{Security: transport.Security{Client: cfg}})
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	resp := new(CAResponse)
	if err := cc.Invoke(ctx, "/"+ServiceName+"/CA", &CARequest{Nonce: nonce}, resp); err != nil {
		return nil, fmt.Errorf("get the cluster CA from %s: %w", addr, err)
	}
	ca, err := VerifyCA(resp, token, nonce, pin)
	if err != nil {
		return nil, fmt.Errorf("cluster CA from %s: %w", addr, err)
	}
	mu.Lock()
	certs := peer
	mu.Unlock()
	if len(certs) == 0 {
		return nil, fmt.Errorf("cluster CA from %s: the node sent no certificate", addr)
	}
	if err := verifyChain(ca.Pool(), certs, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, fmt.Errorf("cluster CA from %s: the node's own certificate is not from the CA it vouched for (%w): %w", addr, ErrNotClusterCA, err)
	}
	return ca, nil
}

// Issued is what a bootstrap gives a node: its identity, the PEM files to
// keep, and the CA key when it asked as a server.
type Issued struct {
	Identity *Identity
	CertPEM  []byte // leaf and CA
	KeyPEM   []byte
	CAKeyPEM []byte // servers only
}

// Bootstrap gets a certificate for names from the cluster at addr: it
// fetches and checks the CA (FetchCA with pin, unless ca is given, e.g.
// saved by an earlier start or the operator's), makes a key, and has a CSR
// signed over a connection verified against the CA.
func Bootstrap(ctx context.Context, addr, token, pin string, ca *CA, names Names, server bool) (*Issued, error) {
	var err error
	if ca == nil {
		if ca, err = FetchCA(ctx, addr, token, pin); err != nil {
			return nil, err
		}
	}
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := NewCSR(key, names)
	if err != nil {
		return nil, err
	}
	cc, err := transport.Dial(addr, transport.Options{Security: transport.Security{Token: token, Client: ClientTLS(ca)}})
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	resp := new(SignResponse)
	if err := cc.Invoke(ctx, "/"+ServiceName+"/Sign", &SignRequest{CSR: csr, Server: server}, resp); err != nil {
		return nil, fmt.Errorf("get a certificate from %s: %w", addr, err)
	}
	id, err := NewIdentity(ca, resp.Cert, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate from %s: %w", addr, err)
	}
	out := &Issued{Identity: id, CertPEM: resp.Cert, KeyPEM: keyPEM}
	if server && len(resp.CAKey) > 0 {
		full, err := ParseCA(ca.PEM, resp.CAKey)
		if err != nil {
			return nil, fmt.Errorf("CA key from %s: %w", addr, err)
		}
		out.CAKeyPEM = resp.CAKey
		out.Identity.CA = full
	}
	return out, nil
}

// Save writes an issued identity into dir (CA, certificate and key, and
// the CA key when given), replacing files of an earlier bootstrap.
func (is *Issued) Save(dir string) error {
	if err := mkdir(dir); err != nil {
		return err
	}
	if len(is.CAKeyPEM) > 0 {
		if err := writeReplace(filepath.Join(dir, CAKeyFile), is.CAKeyPEM, 0o600); err != nil {
			return err
		}
	}
	if err := writeReplace(filepath.Join(dir, CAFile), is.Identity.CA.PEM, 0o644); err != nil {
		return err
	}
	if err := writeReplace(filepath.Join(dir, KeyFile), is.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeReplace(filepath.Join(dir, CertFile), is.CertPEM, 0o644)
}

// IssueLocal makes a key and a certificate for names signed by ca (which
// must hold its key), and saves them in dir when dir is not empty: what a
// node holding the CA does at every start (its addresses may have
// changed).
func IssueLocal(ca *CA, names Names, dir string) (*Identity, error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue(key.Public(), names, DefaultCertDays)
	if err != nil {
		return nil, err
	}
	id, err := NewIdentity(ca, cert, keyPEM)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		is := &Issued{Identity: id, CertPEM: append(cert, ca.PEM...), KeyPEM: keyPEM}
		if err := is.Save(dir); err != nil {
			return nil, err
		}
	}
	return id, nil
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("TLS dir: %w", err)
	}
	return nil
}

// badProofError is ErrBadProof with the gRPC code of a token refusal
// (codes.Unauthenticated), which is what it means to the user.
type badProofError struct{}

// It reads like the node's own refusal of a wrong token.
func (e badProofError) Error() string { return e.GRPCStatus().Err().Error() }

func (badProofError) Is(target error) bool { return target == ErrBadProof }

func (badProofError) GRPCStatus() *status.Status {
	return status.New(codes.Unauthenticated, "invalid cluster token: the node did not prove it holds the token given here (a different token, or a node of another cluster)")
}
