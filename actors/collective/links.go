package collective

import "context"

// Header describes one message of a collective call. A receiver checks it
// against the message it expects, so that members making different calls
// fail with ErrMismatch instead of mixing up buffers.
type Header struct {
	Seq   uint64 // the call's number in the group, from 1
	Kind  Kind   // the operation
	Op    Op     // the reduction (reductions only)
	Root  int32  // the root (broadcasts only)
	Count uint64 // the call's buffer length in elements
	Chunk uint32 // the message's index within the call, per sender
}

// Kind is a collective operation, as carried in a Header.
type Kind uint8

const (
	KindAllreduce Kind = iota + 1
	KindBroadcast
	KindAllgather
	KindReduceScatter
	KindBarrier
	KindAllreduceBF16
	KindBroadcastBF16
	kindEnd
)

func (k Kind) String() string {
	switch k {
	case KindAllreduce:
		return "allreduce"
	case KindBroadcast:
		return "broadcast"
	case KindAllgather:
		return "allgather"
	case KindReduceScatter:
		return "reduce-scatter"
	case KindBarrier:
		return "barrier"
	case KindAllreduceBF16:
		return "allreduce-bf16"
	case KindBroadcastBF16:
		return "broadcast-bf16"
	}
	return "kind?"
}

// Valid reports whether k is a known operation.
func (k Kind) Valid() bool { return k > 0 && k < kindEnd }

// Links are one member's ordered, reliable message streams to every other
// member of a group: what the collective algorithms run over. Package
// troupe/runtime/collective implements them over the network; NewLocal in
// memory.
//
// Errors name the peer: a peer that died or stopped answering makes Send
// and Recv fail with a *MemberError wrapping ErrMemberLost at once, and
// once a member is lost every later call fails the same way (the group
// must be formed again). A peer that closed its links cleanly sent
// everything it will send: what it sent before still arrives, and only a
// Recv that needs more from it (or a Send to it) fails, naming it. Links
// are safe for one sender and one receiver per peer at a time.
type Links interface {
	// Send sends one message to member to. It returns once data may be
	// reused (the peer may not have received it yet).
	Send(ctx context.Context, to int, h Header, data []byte) error
	// Recv receives the next message from member from into buf. Its
	// header must equal h and its payload be len(buf) bytes, or Recv
	// fails with an error wrapping ErrMismatch.
	Recv(ctx context.Context, from int, h Header, buf []byte) error
	// Fail tells every peer that this member's current call failed with
	// err (a *MemberError naming the member at fault), so that their
	// pending calls fail with it too instead of waiting for a timeout.
	Fail(err error)
	// Close releases the links cleanly: what this member sent still
	// reaches the peers, whose calls fail only where they need more from
	// it. A call of this member's in progress fails with ErrClosed.
	Close() error
}

// LossNotifier is what Links may also do: say when the group has failed
// (a member died, was cut off or closed mid-call) as soon as it is
// noticed, between calls too: its connections' heartbeats and ends are
// watched all the time. A Group over such Links passes it on (see
// Group's Lost and Err), so that work outside the group's own calls (NCCL
// kernels on the devices) can stop waiting for a member that is gone.
type LossNotifier interface {
	// Lost is closed once the group has failed.
	Lost() <-chan struct{}
	// Err, once Lost is closed, is the failure: a *MemberError wrapping
	// ErrMemberLost or ErrMismatch.
	Err() error
}

// RecvWither is what Links may also do: receive a message and hand its
// payload to fn without copying it into a buffer of the caller's first.
// The ring reduces received chunks with it straight from the transport's
// buffer. data is valid only during fn.
type RecvWither interface {
	RecvWith(ctx context.Context, from int, h Header, n int, fn func(data []byte)) error
}
