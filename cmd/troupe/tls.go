package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"troupe/cmd/internal/cli"
	"troupe/runtime/pki"
	"troupe/runtime/security"
)

const tlsHelp = `Commands:
  troupe tls ca create [--days N] [--dir D]
        write troupe-ca.pem and troupe-ca-key.pem (mode 0600)
  troupe tls cert create --name NODE [--dns NAMES] [--ip IPS] [--days N] [--ca F] [--ca-key F] [--dir D]
        write troupe-NODE.pem and troupe-NODE-key.pem signed by the CA; the
        certificate serves and connects (a node is both)
  troupe tls hash [FILE]
        print the pin of a CA certificate (default troupe-ca.pem), for --ca-hash

Files are written to the current directory (or --dir) and never overwritten.
Start nodes with them:
  troupe start ... --tls-ca troupe-ca.pem --tls-cert troupe-NODE.pem --tls-key troupe-NODE-key.pem
Without them, the head makes the cluster CA itself (see troupe start -h).`

func runTLS(ctx context.Context, args []string) error {
	usage := func() error {
		fmt.Fprintln(os.Stderr, "Usage: troupe tls ca create | cert create | hash\n\n"+tlsHelp)
		return cli.ErrUsage
	}
	if len(args) == 0 {
		return usage()
	}
	switch {
	case len(args) >= 2 && args[0] == "ca" && args[1] == "create":
		return runTLSCACreate(args[2:])
	case len(args) >= 2 && args[0] == "cert" && args[1] == "create":
		return runTLSCertCreate(args[2:])
	case args[0] == "hash":
		return runTLSHash(args[1:])
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Println(tlsHelp)
		return nil
	}
	return usage()
}

const (
	caCertName = "troupe-ca.pem"
	caKeyName  = "troupe-ca-key.pem"
)

func runTLSCACreate(args []string) error {
	fs := newFlagSet("tls ca create", "[flags]", "Writes troupe-ca.pem and troupe-ca-key.pem (mode 0600); refuses to overwrite them.")
	days := fs.Int("days", pki.DefaultCADays, "validity in days")
	name := fs.String("common-name", "troupe cluster CA", "the CA's common name")
	dir := fs.String("dir", ".", "directory to write to")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	if *days <= 0 {
		return fmt.Errorf("--days %d: want at least 1", *days)
	}
	certPath, keyPath := filepath.Join(*dir, caCertName), filepath.Join(*dir, caKeyName)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s: %w", p, pki.ErrExists)
		}
	}
	ca, keyPEM, err := pki.NewCA(*name, *days)
	if err != nil {
		return err
	}
	if err := pki.WriteNew(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := pki.WriteNew(certPath, ca.PEM, 0o644); err != nil {
		return err
	}
	fmt.Printf("==> wrote %s\n==> wrote %s (keep it secret: it signs certificates)\nCA hash: %s\n", certPath, keyPath, ca.Hash())
	return nil
}

func runTLSCertCreate(args []string) error {
	fs := newFlagSet("tls cert create", "--name NODE [flags]", "Writes troupe-NODE.pem and troupe-NODE-key.pem (mode 0600) signed by the CA; refuses to overwrite them.")
	name := fs.String("name", "", "the node's name (its certificate's common name and file names)")
	dns := fs.String("dns", "", "DNS names the node is reached by, comma-separated (localhost is always added)")
	ips := fs.String("ip", "", "IP addresses the node is reached at, comma-separated (127.0.0.1 and ::1 are always added)")
	days := fs.Int("days", pki.DefaultCertDays, "validity in days")
	caFile := fs.String("ca", caCertName, "the CA certificate")
	caKey := fs.String("ca-key", caKeyName, "the CA's key")
	dir := fs.String("dir", ".", "directory to write to")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	if *name == "" || strings.ContainsAny(*name, "/\\ \t") {
		return fmt.Errorf("--name %q: give the node a name without spaces or slashes", *name)
	}
	if *days <= 0 {
		return fmt.Errorf("--days %d: want at least 1", *days)
	}
	ca, err := pki.LoadCA(*caFile, *caKey)
	if err != nil {
		return fmt.Errorf("%w (make one with troupe tls ca create)", err)
	}
	names := pki.Names{CommonName: *name, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, d := range splitList(*dns) {
		names.DNS = append(names.DNS, d)
	}
	for _, s := range splitList(*ips) {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("--ip %q: not an IP address", s)
		}
		names.IPs = append(names.IPs, ip)
	}
	certPath, keyPath := filepath.Join(*dir, "troupe-"+*name+".pem"), filepath.Join(*dir, "troupe-"+*name+"-key.pem")
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s: %w", p, pki.ErrExists)
		}
	}
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return err
	}
	cert, err := ca.Issue(key.Public(), names, *days)
	if err != nil {
		return err
	}
	if err := pki.WriteNew(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := pki.WriteNew(certPath, append(cert, ca.PEM...), 0o644); err != nil {
		return err
	}
	fmt.Printf("==> wrote %s\n==> wrote %s\nstart the node with: --tls-ca %s --tls-cert %s --tls-key %s\n", certPath, keyPath, *caFile, certPath, keyPath)
	return nil
}

func runTLSHash(args []string) error {
	file := caCertName
	if len(args) > 1 {
		return fmt.Errorf("troupe tls hash [FILE]: one file at most")
	}
	if len(args) == 1 {
		file = args[0]
	}
	ca, err := pki.LoadCA(file, "")
	if err != nil {
		return err
	}
	fmt.Println(ca.Hash())
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// tlsFlags are the TLS flags of commands that connect to a cluster.
type tlsFlags struct {
	insecure *bool
	caHash   *string
	caFile   *string
}

// addTLSFlags defines the TLS flags, defaulting to the environment
// (security.FromEnv); commands without them use the environment only.
func addTLSFlags(fs *flag.FlagSet) *tlsFlags {
	env := security.FromEnv()
	return &tlsFlags{
		insecure: fs.Bool("insecure", env.Insecure, "connect in plaintext, to a cluster started with --insecure (default: TROUPE_INSECURE=1)"),
		caHash:   fs.String("ca-hash", env.CAHash, "trust only a cluster CA with this hash sha256:HEX (default TROUPE_CA_HASH)"),
		caFile:   fs.String("tls-ca", env.CAFile, "trust only this CA certificate (PEM) (default TROUPE_TLS_CA, or --data-dir's tls/ca.pem)"),
	}
}

// clientTLS returns the client settings; a node's data dir on this machine
// gives its CA when nothing else does.
func (f *tlsFlags) clientTLS(dataDir string) security.TLS {
	return security.TLS{Insecure: *f.insecure, CAHash: *f.caHash, CAFile: *f.caFile}.WithDataDir(dataDir)
}
