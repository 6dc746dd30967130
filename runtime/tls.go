package runtime

// A driver's connections to a cluster are TLS by default, trusting the
// cluster CA that the node proves with the token; these options (and
// their environment variables) narrow or turn that off.

// CAHash pins the cluster CA: Init refuses a cluster whose CA has another
// hash ("sha256:…", printed by `troupe start --head` and `troupe status`).
// TROUPE_CA_HASH sets it too.
func CAHash(hash string) Option { return func(c *config) { c.tls.CAHash = hash } }

// TLSCA trusts only the CA certificate in file (PEM): the operator's, or a
// copy of a node's <data-dir>/tls/ca.pem. TROUPE_TLS_CA sets it too.
func TLSCA(file string) Option { return func(c *config) { c.tls.CAFile = file } }

// Insecure connects in plaintext, to a cluster started with --insecure.
// TROUPE_INSECURE=1 sets it too.
func Insecure() Option { return func(c *config) { c.tls.Insecure = true } }
