// Package pki is the cluster's certificate authority and the bootstrap that
// hands its certificates to nodes and drivers.
//
// The head node makes a CA (ECDSA P-256) in its data dir on first start.
// A node or driver that holds the cluster token gets a certificate from it
// in two steps, both over TLS to a node:
//
//  1. CA (no token sent): the requester sends a random nonce and receives
//     the CA certificate with HMAC-SHA256(key(token), nonce ‖ SHA-256(CA)).
//     Only a holder of the token can make that proof, so the CA is trusted
//     because the node proved it knows the token, without the token ever
//     being sent to a node not yet trusted. When the requester was given a
//     pin (--ca-hash sha256:…, the SHA-256 of the CA's public key as
//     `kubeadm join --discovery-token-ca-cert-hash` uses), the CA must also
//     match it; a mismatch is refused (ErrCAMismatch).
//  2. Sign (token sent, now to a verified node): the requester sends a CSR
//     for a key it made itself (the private key never leaves it) and gets
//     back a certificate signed by the CA.
//
// Operators may bring their own CA, certificates and keys instead; the
// `troupe tls` commands write them (files refuse to be overwritten).
//
// Peers verify each other's certificate chain against the cluster CA
// (mutual TLS between nodes). Host names are not checked, as in Consul's
// default (verify_server_hostname=false): the CA is private to the cluster,
// so every certificate it signed belongs to a member; the certificates
// still carry the node's addresses and names as SANs for other tools.
package pki
