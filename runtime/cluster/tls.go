package cluster

import (
	"context"
	"errors"
	"net"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/client"
	"troupe/runtime/pki"
	"troupe/runtime/security"
	"troupe/runtime/transport"
)

// Security returns the credentials of the node's connections: the token,
// and the TLS configurations unless the node runs with TLS.Insecure.
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

// setupTLS gives the node its TLS identity (security.ResolveNode) and
// fills n.sec. It runs before the node listens.
func (n *Node) setupTLS(ctx context.Context) error {
	n.pki = &pki.Server{Token: n.cfg.Token, Forward: n.forwardSign}
	res, err := security.ResolveNode(ctx, security.Node{Token: n.cfg.Token, TLS: n.cfg.TLS,
		Head: n.cfg.Role == RoleHead, Server: n.cfg.Role.isServer(), DeriveCA: n.cfg.BootstrapExpect > 0,
		DataDir: n.cfg.DataDir, Names: n.certNames(), Join: n.cfg.Join, Self: n.r.grpcAddr(),
		JoinTimeout: n.cfg.JoinTimeout, Log: n.log})
	switch {
	case errors.Is(err, security.ErrConfig):
		return alsoError{err, ErrConfig}
	case errors.Is(err, security.ErrUnreachable):
		return alsoError{err, ErrJoin}
	case err != nil:
		return err
	}
	n.sec, n.ident, n.tlsDir = res.Security, res.Identity, res.Dir
	if n.ident != nil {
		n.pki.SetCA(n.ident.CA)
	}
	return nil
}

// alsoError is err, and matches target too (errors.Is): the node's own
// sentinel for an error of the packages it uses.
type alsoError struct{ err, target error }

func (e alsoError) Error() string   { return e.err.Error() }
func (e alsoError) Unwrap() []error { return []error{e.err, e.target} }

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

// NewClientTLS is NewClient with the TLS settings t.
func NewClientTLS(addrs string, token string, t security.TLS) (*Client, error) {
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
		return []string{security.EnvInsecure + "=", security.EnvCAHash + "=" + h, security.EnvTLSCA + "="}
	}
	return []string{security.EnvInsecure + "=1", security.EnvCAHash + "=", security.EnvTLSCA + "="}
}
