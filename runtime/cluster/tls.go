package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/client"
	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

// TLSConfig is how a node secures its TCP connections (gRPC, raft, job
// uploads and logs, and the worker and object ports of its processes).
//
// By default a node uses the cluster CA: the head makes it in
// <data-dir>/tls, servers started with --bootstrap-expect derive it from
// the token (pki.DeriveCA: there is no head), and every other node gets a
// certificate from the node it joins (pki.Bootstrap). Operators may give
// their own CA, certificate and key instead.
type TLSConfig struct {
	// Insecure turns TLS off: plaintext TCP, the token still checked. For
	// networks the operator trusts (and for measuring TLS's cost).
	Insecure bool
	// CAFile, CertFile and KeyFile are the operator's CA certificate and
	// this node's certificate and key (PEM); all three or none.
	CAFile, CertFile, KeyFile string
	// CAHash pins the cluster CA ("sha256:…", its public key's SHA-256)
	// when joining: a CA with another hash is refused. Empty: the CA is
	// trusted because the node it came from proved it holds the token.
	CAHash string
	// SANs are extra host names or IPs for this node's certificate
	// (besides its addresses, host name and localhost).
	SANs []string
}

// renewBefore: a saved certificate closer than this to its expiry is
// replaced at start.
const renewBefore = 30 * 24 * time.Hour

// Security returns the credentials of the node's connections: the token,
// and the TLS configurations unless the node runs with Insecure.
func (n *Node) Security() transport.Security { return n.sec }

// CAHash returns the pin of the cluster CA ("" with Insecure), for
// joiners' --ca-hash.
func (n *Node) CAHash() string {
	if n.ident == nil {
		return ""
	}
	return n.ident.CA.Hash()
}

// TLSDir returns where the node keeps its CA and certificate files
// (ca.pem, node.pem, node-key.pem), or "" when it keeps them in memory
// only (no data dir) or the operator gave them.
func (n *Node) TLSDir() string { return n.tlsDir }

// setupTLS gives the node its TLS identity (see TLSConfig) and fills
// n.sec. It runs before the node listens.
func (n *Node) setupTLS(ctx context.Context) error {
	t := n.cfg.TLS
	n.sec = transport.Security{Token: n.cfg.Token}
	n.pki = &pki.Server{Token: n.cfg.Token, Forward: n.forwardSign}
	if t.Insecure {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.CAHash != "" {
			return fmt.Errorf("%w: --insecure turns TLS off: drop --tls-ca/--tls-cert/--tls-key/--ca-hash, or --insecure", ErrConfig)
		}
		n.log.Warn("TLS is off (--insecure): traffic between nodes, with the token, travels in plaintext")
		return nil
	}
	pin := ""
	if t.CAHash != "" {
		var err error
		if pin, err = pki.ParseHash(t.CAHash); err != nil {
			return fmt.Errorf("%w: --ca-hash: %v", ErrConfig, err)
		}
	}
	id, how, err := n.identity(ctx, pin)
	if err != nil {
		return err
	}
	if pin != "" && id.CA.Hash() != pin {
		return fmt.Errorf("%w: this node's CA is %s, want --ca-hash %s", pki.ErrCAMismatch, id.CA.Hash(), pin)
	}
	n.ident = id
	n.pki.SetCA(id.CA)
	n.sec.Server, n.sec.Client = id.ServerTLS(), id.ClientTLS()
	n.log.Info("TLS on", "ca_hash", id.CA.Hash(), "certificate", how, "expires", id.Leaf.NotAfter.UTC().Format(time.DateOnly))
	return nil
}

// identity finds, makes or fetches the node's certificate; how says which.
func (n *Node) identity(ctx context.Context, pin string) (*pki.Identity, string, error) {
	t := n.cfg.TLS
	if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
		if t.CAFile == "" || t.CertFile == "" || t.KeyFile == "" {
			return nil, "", fmt.Errorf("%w: give --tls-ca, --tls-cert and --tls-key together", ErrConfig)
		}
		id, err := pki.LoadIdentity(t.CAFile, t.CertFile, t.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("%w: operator certificates: %v", ErrConfig, err)
		}
		if remain := time.Until(id.Leaf.NotAfter); remain < renewBefore {
			n.log.Warn("the node certificate expires soon: renew it", "file", t.CertFile, "expires", id.Leaf.NotAfter)
		}
		return id, "operator's " + t.CertFile, nil
	}
	names := n.certNames()
	if n.cfg.DataDir != "" {
		n.tlsDir = pki.Dir(n.cfg.DataDir)
	}
	// A node that holds the CA (the head; a server that joined before)
	// signs its own certificate, fresh at every start: its addresses may
	// have changed.
	var ca *pki.CA
	if n.tlsDir != "" {
		caFile := filepath.Join(n.tlsDir, pki.CAFile)
		keyFile := filepath.Join(n.tlsDir, pki.CAKeyFile)
		switch {
		case n.cfg.Role == RoleHead:
			c, created, err := pki.LoadOrCreateCA(n.tlsDir)
			if err != nil {
				return nil, "", fmt.Errorf("cluster CA in %s: %w", n.tlsDir, err)
			}
			if created {
				n.log.Info("made the cluster CA", "dir", n.tlsDir, "ca_hash", c.Hash())
			}
			ca = c
		case exists(caFile) && exists(keyFile):
			c, err := pki.LoadCA(caFile, keyFile)
			if err != nil {
				return nil, "", err
			}
			ca = c
		}
	} else if n.cfg.Role == RoleHead {
		return nil, "", fmt.Errorf("%w: a head needs --data-dir for its CA", ErrConfig)
	}
	if ca == nil && n.cfg.BootstrapExpect > 0 {
		c, err := pki.DeriveCA(n.cfg.Token)
		if err != nil {
			return nil, "", err
		}
		ca = c
	}
	if ca != nil {
		id, err := pki.IssueLocal(ca, names, n.tlsDir)
		if err != nil {
			return nil, "", err
		}
		return id, "signed by this node's CA", nil
	}
	// A node that bootstrapped before keeps its certificate while it is
	// valid for a while longer.
	var saved *pki.CA
	if n.tlsDir != "" && exists(filepath.Join(n.tlsDir, pki.CertFile)) {
		id, err := pki.LoadIdentity(filepath.Join(n.tlsDir, pki.CAFile), filepath.Join(n.tlsDir, pki.CertFile), filepath.Join(n.tlsDir, pki.KeyFile))
		switch {
		case err == nil && time.Until(id.Leaf.NotAfter) > renewBefore:
			return id, "saved in " + n.tlsDir, nil
		case err == nil:
			saved = id.CA
		default:
			n.log.Warn("saved certificate unusable: asking the cluster for a new one", "dir", n.tlsDir, "err", err)
			if c, cerr := pki.LoadCA(filepath.Join(n.tlsDir, pki.CAFile), ""); cerr == nil {
				saved = c
			}
		}
	}
	if saved != nil && pin != "" && saved.Hash() != pin {
		return nil, "", fmt.Errorf("%w: the CA saved in %s is %s, want %s (remove %s to join another cluster)", pki.ErrCAMismatch, n.tlsDir, saved.Hash(), pin, n.tlsDir)
	}
	is, via, err := n.bootstrapTLS(ctx, pin, saved, names)
	if err != nil {
		return nil, "", err
	}
	if n.tlsDir != "" {
		if err := is.Save(n.tlsDir); err != nil {
			return nil, "", err
		}
	}
	if pin == "" && saved == nil {
		n.log.Warn("trusting the cluster CA because the node proved it holds the token (no --ca-hash pin)", "via", via, "ca_hash", is.Identity.CA.Hash())
	}
	return is.Identity, "issued by the cluster via " + via, nil
}

// bootstrapTLS gets a certificate from one of the join addresses, retrying
// (like join) while none answers, and failing at once on a refusal that
// retrying will not change.
func (n *Node) bootstrapTLS(ctx context.Context, pin string, ca *pki.CA, names pki.Names) (*pki.Issued, string, error) {
	if len(n.cfg.Join) == 0 {
		return nil, "", fmt.Errorf("%w: no certificate and no --join address to get one from", ErrConfig)
	}
	deadline := time.Now().Add(n.cfg.JoinTimeout)
	delay := 300 * time.Millisecond
	for {
		var last error
		for _, addr := range n.cfg.Join {
			if addr == n.r.grpcAddr() {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			is, err := pki.Bootstrap(actx, addr, n.cfg.Token, pin, ca, names, n.cfg.Role.isServer())
			cancel()
			if err == nil {
				return is, addr, nil
			}
			if permanentTLSError(err) {
				return nil, "", fmt.Errorf("TLS bootstrap from %s: %w", addr, err)
			}
			last = err
		}
		if time.Now().After(deadline) {
			return nil, "", fmt.Errorf("%w: TLS bootstrap: no node at %s gave a certificate within %v: %v", ErrJoin, strings.Join(n.cfg.Join, ", "), n.cfg.JoinTimeout, last)
		}
		n.log.Debug("TLS bootstrap: retrying", "err", last)
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("TLS bootstrap: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// permanentTLSError reports bootstrap failures that retrying will not fix.
func permanentTLSError(err error) bool {
	if errors.Is(err, pki.ErrCAMismatch) || errors.Is(err, pki.ErrBadProof) || errors.Is(err, pki.ErrExpired) || errors.Is(err, pki.ErrMalformed) {
		return true
	}
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) {
		switch st.GRPCStatus().Code() {
		case codes.Unauthenticated, codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied:
			return true
		}
	}
	var uae x509.UnknownAuthorityError
	return errors.As(err, &uae) || strings.Contains(err.Error(), "not from this cluster's CA") || strings.Contains(err.Error(), "does not speak TLS")
}

// forwardSign has a server sign a request that reached a node without
// the CA key (a worker node someone joined through).
func (n *Node) forwardSign(ctx context.Context, req *pki.SignRequest) (*pki.SignResponse, error) {
	addr := n.leaderGRPC()
	if addr == "" || addr == n.r.grpcAddr() {
		return nil, status.Error(codes.Unavailable, "no server to sign the certificate (no leader yet): retry")
	}
	cc, err := n.peers.get(addr)
	if err != nil {
		return nil, err
	}
	resp := new(pki.SignResponse)
	if err := cc.Invoke(ctx, "/"+pki.ServiceName+"/Sign", req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// certNames are the names in the node's certificate: its ID, addresses,
// host name, localhost and the operator's extra SANs.
func (n *Node) certNames() pki.Names {
	names := pki.Names{CommonName: n.cfg.NodeID}
	seenIP := map[string]bool{}
	addIP := func(ip net.IP) {
		if ip != nil && !ip.IsUnspecified() && !seenIP[ip.String()] {
			seenIP[ip.String()] = true
			names.IPs = append(names.IPs, ip)
		}
	}
	seenDNS := map[string]bool{}
	addDNS := func(s string) {
		if s != "" && !seenDNS[s] {
			seenDNS[s] = true
			names.DNS = append(names.DNS, s)
		}
	}
	addIP(net.ParseIP(n.r.host))
	addIP(net.ParseIP(hostOf(n.cfg.BindAddr)))
	addIP(net.IPv4(127, 0, 0, 1))
	addIP(net.IPv6loopback)
	addDNS("localhost")
	if h, err := os.Hostname(); err == nil {
		addDNS(h)
	}
	for _, s := range append([]string{n.cfg.Advertise}, n.cfg.TLS.SANs...) {
		if ip := net.ParseIP(s); ip != nil {
			addIP(ip)
		} else {
			addDNS(s)
		}
	}
	return names
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ClientTLS is how a Client secures its connections (client.TLS).
type ClientTLS = client.TLS

// NewClientTLS is NewClient with the TLS settings t.
func NewClientTLS(addrs string, token string, t ClientTLS) (*Client, error) {
	c, err := client.NewClientTLS(addrs, token, t)
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// driverTLSEnv is how a job's driver, started by this node, connects back
// to it: in plaintext when the node runs with --insecure, else pinned to
// the node's CA (runtime.Init reads these).
func (n *Node) driverTLSEnv() []string {
	if h := n.CAHash(); h != "" {
		return []string{"TROUPE_INSECURE=", "TROUPE_CA_HASH=" + h, "TROUPE_TLS_CA="}
	}
	return []string{"TROUPE_INSECURE=1", "TROUPE_CA_HASH=", "TROUPE_TLS_CA="}
}
