package driver

import (
	"context"
	"fmt"
	"net"
	"os"

	"troupe/runtime/client"
	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

// driverSecurity returns the driver's credentials. With TLS (gc learned
// the cluster CA), the driver gets a certificate from the cluster for the
// server of its own objects (put.go): a key made here, a CSR signed by a
// node reached over a connection verified against the CA, as nodes join.
// Without TLS, the token.
func driverSecurity(ctx context.Context, gc *client.Client, tok string) (transport.Security, error) {
	ca := gc.CA()
	if ca == nil {
		return transport.Security{Token: tok}, nil
	}
	names := localNames()
	var last error
	for _, a := range gc.Addrs() {
		is, err := pki.Bootstrap(ctx, a, tok, "", ca, names, false)
		if err == nil {
			return is.Identity.Security(tok), nil
		}
		last = err
	}
	return transport.Security{}, fmt.Errorf("init: a certificate for the driver from the cluster: %w", last)
}

// maxDriverIPs keeps a host with many interfaces under the CSR's limit.
const maxDriverIPs = 48

// localNames are the names of the driver's certificate: this machine's
// host name and addresses, and localhost.
func localNames() pki.Names {
	n := pki.Names{CommonName: "driver", DNS: []string{"localhost"}}
	if h, err := os.Hostname(); err == nil && h != "localhost" {
		n.DNS = append(n.DNS, h)
		n.CommonName = "driver@" + h
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLinkLocalUnicast() && len(n.IPs) < maxDriverIPs {
			n.IPs = append(n.IPs, ipn.IP)
		}
	}
	if len(n.IPs) == 0 {
		n.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	return n
}
