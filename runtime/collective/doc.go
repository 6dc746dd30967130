// Package collective is the network transport of collective groups
// (package troupe/actors/collective): the members of a group connect to
// each other directly, worker process to worker process, with the same
// handshake as every other cluster connection (transport.Security: TLS and
// the cluster token on TCP; the token on Unix sockets between processes of
// one host, which are preferred there).
//
// A worker process installs a Transport at start (collective.SetTransport).
// When a program forms a group, each member's process readies a slot for it
// and answers its endpoint (the process's listener address); once the
// program has every endpoint, each member dials the members of lower rank
// and accepts the others, so every pair of members has one connection.
// After a hello frame that names the group's epoch and both ranks, a
// connection carries frames: data (a collective.Header and its payload),
// heartbeats, and failure reports (frame.go).
//
// Members on one host (connected over a Unix socket) move their data
// through shared memory instead (shm.go): after the hello the dialling
// member passes a sealed memfd over the socket, both map it, and each
// direction is a ring the receiver reduces from in place. The socket stays
// for the rest (heartbeats, failure reports, the bye) and, by ending, tells
// that the peer died. TROUPE_COLLECTIVE_SHM=0 (ShmEnv) keeps the data on
// the socket.
//
// Each connection has a reader goroutine that reads ahead into a bounded
// queue (so that the network receives chunk i+1 while the algorithm
// reduces chunk i), answers nothing, and watches the peer: a connection
// that ends, or stays silent longer than Config.Timeout while heartbeats
// are due every Config.Heartbeat, makes the member lost; so does a
// failure report from any member. Then every pending and later call of the
// group fails on this member with a *collective.MemberError naming the
// member at fault, and this member tells the others.
package collective
