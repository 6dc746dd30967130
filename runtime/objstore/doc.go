// Package objstore keeps large call results in the process that computed
// them and moves them, on demand, straight to the process that consumes
// them: Ray's object store and ownership, reduced to what troupe's call
// path needs.
//
// # Objects and references
//
// A worker process has one Store. When an actor method returns a result of
// at least InlineMax bytes, the worker puts the encoded result in its Store
// and replies with a Ref instead of the bytes: the object's random ID, a
// random 128-bit key (the capability to fetch or release it), the owner's
// transfer address and the size. A Ref travels in place of a value as the
// bytes of Ref.Encode, which begin with 0xc1, a byte that never begins a
// msgpack value, so IsRef tells a reference from any encoded value.
//
// The driver resolves the call's future with the reference (no bytes).
// Passing that future to another call (actors.CallRef) forwards the
// reference; the callee's worker fetches the bytes from the owner with a
// Client, or takes them from its own Store when it is the owner. Get on the
// driver fetches them the same way.
//
// # When an object is freed
//
// An owner frees an object when its reference count reaches zero. Put
// starts it at one: the reference held by the caller that got the reply.
// The driver gives that reference up (Client.Release) when the future is
// released (actors.Future.Release) or garbage collected, but not before every
// call the future was passed to has ended: a callee fetches its argument
// before its method runs, so every consumer has its bytes by then. A
// transfer in progress holds its own count, so freeing never cuts one
// short. Objects whose references were never given up are freed with the
// owner process, which ends with its job.
//
// A fetch of a freed object fails with ErrFreed, of an ID the owner never
// held (or a wrong key) with ErrUnknown, and of an owner that cannot be
// reached with ErrUnreachable; none of them waits for anything.
//
// # Transfer protocol
//
// A Client opens connections to the owner's Server (TCP, or the Unix
// socket beside the owner's TCP address when the owner is on the same host:
// see ListenLocal) and keeps a few idle ones per owner. Before anything
// else each connection passes the handshake of the cluster's
// transport.Security (TLS on TCP when the cluster has it, then the token
// proved by HMAC challenge-response): a peer without the token reads no
// object and frees none. Then it starts with the 5-byte preface
// "TOBJ\x01", or "TOBJ\x02" on a TLS connection: the object's bytes of a
// fetch then come in sealed bulk frames (transport.Bulk: AES-GCM under
// keys exported from the TLS session, beside the TLS records, which cost
// two more copies of every byte); then requests and responses alternate:
//
//	fetch:    u8 1 | 16 id | 16 key
//	release:  u8 2 | u16 n | n × (16 id | 16 key)
//	response: u8 status | status 0: u64 size, then size bytes (fetch only)
//	                    | otherwise: u16 length | message
//
// (integers little endian). The owner writes the object from the Store's
// own slice in chunks of ChunkSize; the fetcher reads it in chunks into one
// buffer allocated at the object's size. A transfer thus holds the owner's
// copy and the fetcher's buffer, never a third copy, whatever the size.
package objstore
