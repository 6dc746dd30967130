// Package wire is troupe's direct call path between processes: a framed,
// multiplexed protocol over one long-lived stream connection (TCP, or a Unix
// socket between processes of one node) that carries actor invocations from
// a caller straight to the worker hosting the actor, and their replies back.
//
// A connection passes the handshake of the cluster's transport.Security
// before its first frame (TLS on TCP when the cluster has it, then the
// token proved by HMAC challenge-response; Unix sockets are files only
// their user can open): a peer without the token runs no method.
//
// gRPC carries the control plane; calls take this path because measuring
// showed gRPC's per-message cost (HTTP/2 framing, flow control, one goroutine
// per stream) caps a ping-pong far below a plain framed socket on the same
// machine.
//
// Frame layout (little endian):
//
//	u32 length of the rest | u8 kind | body
//	call:   uvarint callID | string actor | string method | u8 flags |
//	        [uvarint incarnation, with flagEpoch] | bytes arg
//	arg:    uvarint callID | bytes arg              (a call's deferred argument)
//	argerr: uvarint callID | bytes error            (its argument failed)
//	reply:  uvarint callID | u8 status | bytes payload (result, or an error)
//	cancel: uvarint callID
//	needarg: uvarint callID                         (server asks for a call's argument)
//
// where string and bytes are a uvarint length then the bytes. A call may
// name the incarnation of the actor it is for (flagEpoch, the actor's
// committed restart count): a server whose host checks incarnations
// (FencedHost) runs it only on that one and refuses it otherwise with
// actors.ErrStaleIncarnation, so an incarnation the cluster replaced
// serves no caller that knows of its successor. Calls on one
// connection reach the server in the order they were invoked, so per-actor
// order holds. A call whose argument is a future not resolved yet is sent at
// once with flagArgLater, and its argument follows in an arg frame when
// ready: order is kept and the callee, not the caller, waits. When that
// future is the result of an earlier call on the same connection, the call
// names that call instead (flagArgOfCall): the server passes the result on
// when it has it (kept, or when that call replies), so a chain of actors in
// one worker does not wait for a round trip through the caller, and asks
// for it with a needarg frame in the rare case it no longer has it.
//
// Who does the work decides the latency more than what the work is: on
// this project's virtual machines, waking another goroutine (a futex wake
// of a sleeping thread) costs about as much as a socket round trip. So a
// lone call is written by its caller, run by the server's reading goroutine
// and answered by it (inline.go), and its reply is read by the caller
// waiting for it (Client, through actors.Driver): a synchronous call wakes
// no goroutine on either side, as in a raw ping-pong. Goroutines that
// write, read and run calls take over only for bursts, long calls and
// results nobody waits for yet. And a goroutine that finds no input polls
// the socket for up to 50 µs before it sleeps, when its recent waits were
// that short (runtime/transport/spin.go, which TLS connections share): on
// these machines waking an idle vCPU costs more than the rest of a round
// trip.
package wire
