package collective

import (
	"context"
	"fmt"
)

// Op is a reduction.
type Op uint8

const (
	// Sum adds the members' values.
	Sum Op = iota
	// Mean is Sum divided by the group's size.
	Mean
	// Max keeps the largest value (as x86's MAXPS: a NaN in the later
	// operand of the fixed order wins).
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Group is one member's view of a formed group. Its methods are collective:
// every member calls the same one with buffers of the same length, and
// each call returns when this member's part is done. A Group is not for
// concurrent calls: one call at a time per member, in the same order on
// every member.
type Group interface {
	// Name is the group's name.
	Name() string
	// Rank is this member's index in the group, 0 ≤ Rank < Size.
	Rank() int
	// Size is the number of members.
	Size() int
	// Allreduce replaces buf with the reduction of every member's buf.
	Allreduce(ctx context.Context, buf []float32, op Op) error
	// AllreduceBF16 is Allreduce on bfloat16 bits, which travel as
	// bfloat16 (two bytes an element): each element is reduced in float32
	// over the members' values in rank order, divided by Size() for Mean,
	// and rounded once, to nearest with ties to even.
	AllreduceBF16(ctx context.Context, buf []uint16, op Op) error
	// Broadcast replaces every member's buf with the root's.
	Broadcast(ctx context.Context, buf []float32, root int) error
	// BroadcastBF16 is Broadcast on bfloat16 bits.
	BroadcastBF16(ctx context.Context, buf []uint16, root int) error
	// Allgather sets recv, of length Size()*len(send), to every member's
	// send in rank order.
	Allgather(ctx context.Context, send, recv []float32) error
	// ReduceScatter reduces send, of length Size()*len(recv), over the
	// members and sets recv to this member's part: elements
	// [Rank()*len(recv), (Rank()+1)*len(recv)) of the reduction.
	ReduceScatter(ctx context.Context, send, recv []float32, op Op) error
	// Barrier returns once every member has called it.
	Barrier(ctx context.Context) error
	// Close leaves the group; this member's pending and later calls fail
	// with ErrClosed. What it sent before still reaches the others: their
	// calls fail (ErrMemberLost, naming it) only where they need more from
	// it, so a member may close right after its last call.
	Close() error
}
