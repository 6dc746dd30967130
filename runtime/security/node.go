package security

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

// renewBefore: a saved certificate closer than this to its expiry is
// replaced at start.
const renewBefore = 30 * 24 * time.Hour

// Node describes a node for ResolveNode: its settings, and what decides
// where its certificate comes from.
//
// By default a node uses the cluster CA: the head makes it in
// <data-dir>/tls, servers started with --bootstrap-expect derive it from
// the token (pki.DeriveCA: there is no head), and every other node gets a
// certificate from a node it joins (pki.Bootstrap). Operators may give
// their own CA, certificate and key instead (TLS.CAFile, CertFile,
// KeyFile).
type Node struct {
	Token string
	TLS   TLS
	// Head is the first server: it makes (or loads) the cluster CA in
	// DataDir.
	Head bool
	// Server is a raft server: it asks for the CA key with its
	// certificate, to sign for the nodes that join through it.
	Server bool
	// DeriveCA derives the CA from the token when DataDir holds none
	// (servers formed by --bootstrap-expect).
	DeriveCA bool
	// DataDir keeps the CA and certificate files in DataDir/tls; empty:
	// in memory only.
	DataDir string
	// Names are the names in the node's certificate.
	Names pki.Names
	// Join lists the gRPC addresses a node without a certificate gets one
	// from; Self (the node's own address) is skipped.
	Join []string
	Self string
	// JoinTimeout bounds how long the bootstrap retries while no Join
	// address answers.
	JoinTimeout time.Duration
	Log         *slog.Logger
}

// NodeTLS is a node's resolved security.
type NodeTLS struct {
	// Security is the credentials of all the node's connections.
	Security transport.Security
	// Identity is the node's certificate and CA; nil with Insecure.
	Identity *pki.Identity
	// Dir is where the node keeps its CA and certificate files (ca.pem,
	// node.pem, node-key.pem); "" when it keeps them in memory only (no
	// data dir) or the operator gave them.
	Dir string
}

// ResolveNode gives a node its TLS identity: the operator's files, the
// ones saved in its data dir, a CA it holds or derives, or a certificate
// from the cluster (see Node). It runs before the node listens.
func ResolveNode(ctx context.Context, n Node) (*NodeTLS, error) {
	if n.Log == nil {
		n.Log = slog.Default()
	}
	t := n.TLS
	out := &NodeTLS{Security: transport.Security{Token: n.Token}}
	if t.Insecure {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.CAHash != "" {
			return nil, fmt.Errorf("%w: --insecure turns TLS off: drop --tls-ca/--tls-cert/--tls-key/--ca-hash, or --insecure", ErrConfig)
		}
		n.Log.Warn("TLS is off (--insecure): traffic between nodes, with the token, travels in plaintext")
		return out, nil
	}
	pin, err := t.pin()
	if err != nil {
		return nil, err
	}
	id, how, err := n.identity(ctx, pin, out)
	if err != nil {
		return nil, err
	}
	if pin != "" && id.CA.Hash() != pin {
		return nil, fmt.Errorf("%w: this node's CA is %s, want --ca-hash %s", pki.ErrCAMismatch, id.CA.Hash(), pin)
	}
	out.Identity = id
	out.Security.Server, out.Security.Client = id.ServerTLS(), id.ClientTLS()
	n.Log.Info("TLS on", "ca_hash", id.CA.Hash(), "certificate", how, "expires", id.Leaf.NotAfter.UTC().Format(time.DateOnly))
	return out, nil
}

// identity finds, makes or fetches the node's certificate; how says which.
// It sets out.Dir.
func (n *Node) identity(ctx context.Context, pin string, out *NodeTLS) (*pki.Identity, string, error) {
	t := n.TLS
	if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
		if t.CAFile == "" || t.CertFile == "" || t.KeyFile == "" {
			return nil, "", fmt.Errorf("%w: give --tls-ca, --tls-cert and --tls-key together", ErrConfig)
		}
		id, err := pki.LoadIdentity(t.CAFile, t.CertFile, t.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("%w: operator certificates: %w", ErrConfig, err)
		}
		if remain := time.Until(id.Leaf.NotAfter); remain < renewBefore {
			n.Log.Warn("the node certificate expires soon: renew it", "file", t.CertFile, "expires", id.Leaf.NotAfter)
		}
		return id, "operator's " + t.CertFile, nil
	}
	dir := ""
	if n.DataDir != "" {
		dir = pki.Dir(n.DataDir)
		out.Dir = dir
	}
	// A node that holds the CA (the head; a server that joined before)
	// signs its own certificate, fresh at every start: its addresses may
	// have changed.
	var ca *pki.CA
	if dir != "" {
		caFile, keyFile := filepath.Join(dir, pki.CAFile), filepath.Join(dir, pki.CAKeyFile)
		switch {
		case n.Head:
			c, created, err := pki.LoadOrCreateCA(dir)
			if err != nil {
				return nil, "", fmt.Errorf("cluster CA in %s: %w", dir, err)
			}
			if created {
				n.Log.Info("made the cluster CA", "dir", dir, "ca_hash", c.Hash())
			}
			ca = c
		case exists(caFile) && exists(keyFile):
			c, err := pki.LoadCA(caFile, keyFile)
			if err != nil {
				return nil, "", err
			}
			ca = c
		}
	} else if n.Head {
		return nil, "", fmt.Errorf("%w: a head needs --data-dir for its CA", ErrConfig)
	}
	if ca == nil && n.DeriveCA {
		c, err := pki.DeriveCA(n.Token)
		if err != nil {
			return nil, "", err
		}
		ca = c
	}
	if ca != nil {
		id, err := pki.IssueLocal(ca, n.Names, dir)
		if err != nil {
			return nil, "", err
		}
		return id, "signed by this node's CA", nil
	}
	// A node that bootstrapped before keeps its certificate while it is
	// valid for a while longer.
	var saved *pki.CA
	if dir != "" && exists(filepath.Join(dir, pki.CertFile)) {
		id, err := pki.LoadIdentity(filepath.Join(dir, pki.CAFile), filepath.Join(dir, pki.CertFile), filepath.Join(dir, pki.KeyFile))
		switch {
		case err == nil && time.Until(id.Leaf.NotAfter) > renewBefore:
			return id, "saved in " + dir, nil
		case err == nil:
			saved = id.CA
		default:
			n.Log.Warn("saved certificate unusable: asking the cluster for a new one", "dir", dir, "err", err)
			if c, cerr := pki.LoadCA(filepath.Join(dir, pki.CAFile), ""); cerr == nil {
				saved = c
			}
		}
	}
	if saved != nil && pin != "" && saved.Hash() != pin {
		return nil, "", fmt.Errorf("%w: the CA saved in %s is %s, want %s (remove %s to join another cluster)", pki.ErrCAMismatch, dir, saved.Hash(), pin, dir)
	}
	is, via, err := n.bootstrap(ctx, pin, saved)
	if err != nil {
		return nil, "", err
	}
	if dir != "" {
		if err := is.Save(dir); err != nil {
			return nil, "", err
		}
	}
	if pin == "" && saved == nil {
		n.Log.Warn("trusting the cluster CA because the node proved it holds the token (no --ca-hash pin)", "via", via, "ca_hash", is.Identity.CA.Hash())
	}
	return is.Identity, "issued by the cluster via " + via, nil
}

// bootstrap gets a certificate from one of the join addresses, retrying
// (like joining) while none answers, and failing at once on a refusal
// that retrying will not change.
func (n *Node) bootstrap(ctx context.Context, pin string, ca *pki.CA) (*pki.Issued, string, error) {
	if len(n.Join) == 0 {
		return nil, "", fmt.Errorf("%w: no certificate and no --join address to get one from", ErrConfig)
	}
	deadline := time.Now().Add(n.JoinTimeout)
	delay := 300 * time.Millisecond
	for {
		var last error
		for _, addr := range n.Join {
			if addr == n.Self {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			is, err := pki.Bootstrap(actx, addr, n.Token, pin, ca, n.Names, n.Server)
			cancel()
			if err == nil {
				return is, addr, nil
			}
			if permanent(err) {
				return nil, "", fmt.Errorf("TLS bootstrap from %s: %w", addr, err)
			}
			last = err
		}
		if time.Now().After(deadline) {
			return nil, "", fmt.Errorf("%w: none of %s gave a certificate within %v: %v", ErrUnreachable, strings.Join(n.Join, ", "), n.JoinTimeout, last)
		}
		n.Log.Debug("TLS bootstrap: retrying", "err", last)
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("TLS bootstrap: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// permanent reports a failure to get the cluster CA or a certificate that
// retrying will not fix: a CA or token that does not match, a node of
// another cluster, one that does not speak TLS, a request the node
// refuses.
func permanent(err error) bool {
	for _, target := range []error{pki.ErrCAMismatch, pki.ErrBadProof, pki.ErrExpired, pki.ErrMalformed, pki.ErrNotClusterCA, transport.ErrNotTLS} {
		if errors.Is(err, target) {
			return true
		}
	}
	var uae x509.UnknownAuthorityError
	if errors.As(err, &uae) {
		return true
	}
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) {
		switch st.GRPCStatus().Code() {
		case codes.Unauthenticated, codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied:
			return true
		}
	}
	return false
}
