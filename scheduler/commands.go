package scheduler

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// CommandType is the first byte of an encoded command.
type CommandType uint8

// Command types, one per command struct of the same name. Values are part
// of the raft log format: never renumber.
const (
	CmdRegisterNode         CommandType = 1
	CmdUpdateNodeState      CommandType = 2
	CmdRemoveNode           CommandType = 3
	CmdCreateActor          CommandType = 4
	CmdPlaceActor           CommandType = 5
	CmdActorStarted         CommandType = 6
	CmdActorDied            CommandType = 7
	CmdKillActor            CommandType = 8
	CmdCreatePlacementGroup CommandType = 9
	CmdPlaceBundles         CommandType = 10
	CmdRemovePlacementGroup CommandType = 11
	CmdSubmitJob            CommandType = 12
	CmdJobFinished          CommandType = 13
	CmdBatch                CommandType = 14
)

// String returns the command type's name.
func (t CommandType) String() string {
	if c := newCommand(t); c != nil {
		return fmt.Sprintf("%T", c)[len("*scheduler."):]
	}
	return fmt.Sprintf("CommandType(%d)", uint8(t))
}

// Command is one state change committed through raft. Encode it with
// EncodeCommand and apply it with State.Apply (or FSM.Apply).
type Command interface {
	// Type returns the command's type byte.
	Type() CommandType
}

// RegisterNode adds a node, or refreshes one that re-registers (address,
// labels, liveness). A node that holds allocations may re-register only with
// the same resources and GPUs.
type RegisterNode struct {
	Node NodeInfo `msgpack:"node"` // what the node advertises
	At   int64    `msgpack:"at"`   // Unix nanoseconds, set by the proposer
}

// UpdateNodeState changes a node's liveness. Marking a node dead releases
// everything on it: its actors restart elsewhere within their MaxRestarts
// (or die) and its bundles wait to be reserved again.
type UpdateNodeState struct {
	Node  NodeID    `msgpack:"node"`            // the node
	State NodeState `msgpack:"state"`           // its new liveness
	Cause string    `msgpack:"cause,omitempty"` // recorded as its actors' death cause when dead
	At    int64     `msgpack:"at"`              // Unix nanoseconds
}

// RemoveNode deletes a node, first treating it as dead.
type RemoveNode struct {
	Node  NodeID `msgpack:"node"`            // the node
	Cause string `msgpack:"cause,omitempty"` // recorded as its actors' death cause
	At    int64  `msgpack:"at"`              // Unix nanoseconds
}

// CreateActor records a new actor. The leader decides the placement before
// proposing the command (Planner.CreateActor); Apply checks the placement
// still fits and refuses the command otherwise. A nil Placement records the
// actor as pending with PendingReason.
type CreateActor struct {
	Spec          ActorSpec  `msgpack:"spec"`              // the actor
	Placement     *Placement `msgpack:"place,omitempty"`   // the leader's decision, nil when pending
	PendingReason string     `msgpack:"pending,omitempty"` // why it waits, when Placement is nil
	At            int64      `msgpack:"at"`                // Unix nanoseconds
}

// PlaceActor gives a pending or restarting actor the placement the leader
// decided.
type PlaceActor struct {
	Actor     ActorID   `msgpack:"actor"` // the waiting actor
	Placement Placement `msgpack:"place"` // the leader's decision
	At        int64     `msgpack:"at"`    // Unix nanoseconds
}

// ActorStarted marks a placed actor alive. Incarnation must equal the
// actor's Restarts, so a report about an earlier incarnation is refused.
type ActorStarted struct {
	Actor       ActorID `msgpack:"actor"`          // the actor
	Incarnation int     `msgpack:"inc"`            // its Restarts when it was started
	Address     string  `msgpack:"addr,omitempty"` // where its worker listens
	At          int64   `msgpack:"at"`             // Unix nanoseconds
}

// ActorDied reports that an actor's process ended. Its resources are
// released; it restarts if it has restarts left, else it is dead.
type ActorDied struct {
	Actor       ActorID `msgpack:"actor"` // the actor
	Incarnation int     `msgpack:"inc"`   // its Restarts when it was started
	Cause       string  `msgpack:"cause"` // why it died, for ActorDiedError
	At          int64   `msgpack:"at"`    // Unix nanoseconds
}

// KillActor ends an actor on request. With Restart it is treated like a
// crash (restarted within MaxRestarts); without, it is dead for good.
type KillActor struct {
	Actor   ActorID `msgpack:"actor"`             // the actor
	Restart bool    `msgpack:"restart,omitempty"` // restart it within MaxRestarts
	Cause   string  `msgpack:"cause,omitempty"`   // default "killed"
	At      int64   `msgpack:"at"`                // Unix nanoseconds
}

// CreatePlacementGroup records a placement group. Bundles carries the
// leader's decision for every bundle (all or nothing); empty Bundles
// records the group as pending with PendingReason.
type CreatePlacementGroup struct {
	Spec          GroupSpec         `msgpack:"spec"`              // the group
	Bundles       []BundlePlacement `msgpack:"bundles,omitempty"` // one per bundle, or none when pending
	PendingReason string            `msgpack:"pending,omitempty"` // why it waits
	At            int64             `msgpack:"at"`                // Unix nanoseconds
}

// PlaceBundles reserves waiting bundles of a group (after it was created
// pending, or after a node holding some of its bundles died). All listed
// bundles are reserved or none.
type PlaceBundles struct {
	Group   GroupID           `msgpack:"group"`   // the group
	Bundles []BundlePlacement `msgpack:"bundles"` // every waiting bundle
	At      int64             `msgpack:"at"`      // Unix nanoseconds
}

// RemovePlacementGroup kills the group's actors and frees its reservations.
type RemovePlacementGroup struct {
	Group GroupID `msgpack:"group"` // the group
	At    int64   `msgpack:"at"`    // Unix nanoseconds
}

// SubmitJob records a new running job.
type SubmitJob struct {
	Spec JobSpec `msgpack:"spec"` // the job
	At   int64   `msgpack:"at"`   // Unix nanoseconds
}

// JobFinished ends a job; its non-detached actors die and its non-detached
// placement groups are removed.
type JobFinished struct {
	Job     JobID    `msgpack:"job"`           // the job
	State   JobState `msgpack:"state"`         // JobSucceeded, JobFailed or JobStopped
	Message string   `msgpack:"msg,omitempty"` // final status message
	At      int64    `msgpack:"at"`            // Unix nanoseconds
}

// Batch applies several encoded commands in one raft entry, each on its
// own (one failing does not undo the others). Batches do not nest.
type Batch struct {
	Commands [][]byte `msgpack:"cmds"` // each from EncodeCommand

	decoded []Command // filled by DecodeCommand so Apply does not decode twice
}

// Type implements Command.
func (*RegisterNode) Type() CommandType { return CmdRegisterNode }

// Type implements Command.
func (*UpdateNodeState) Type() CommandType { return CmdUpdateNodeState }

// Type implements Command.
func (*RemoveNode) Type() CommandType { return CmdRemoveNode }

// Type implements Command.
func (*CreateActor) Type() CommandType { return CmdCreateActor }

// Type implements Command.
func (*PlaceActor) Type() CommandType { return CmdPlaceActor }

// Type implements Command.
func (*ActorStarted) Type() CommandType { return CmdActorStarted }

// Type implements Command.
func (*ActorDied) Type() CommandType { return CmdActorDied }

// Type implements Command.
func (*KillActor) Type() CommandType { return CmdKillActor }

// Type implements Command.
func (*CreatePlacementGroup) Type() CommandType { return CmdCreatePlacementGroup }

// Type implements Command.
func (*PlaceBundles) Type() CommandType { return CmdPlaceBundles }

// Type implements Command.
func (*RemovePlacementGroup) Type() CommandType { return CmdRemovePlacementGroup }

// Type implements Command.
func (*SubmitJob) Type() CommandType { return CmdSubmitJob }

// Type implements Command.
func (*JobFinished) Type() CommandType { return CmdJobFinished }

// Type implements Command.
func (*Batch) Type() CommandType { return CmdBatch }

func newCommand(t CommandType) Command {
	switch t {
	case CmdRegisterNode:
		return &RegisterNode{}
	case CmdUpdateNodeState:
		return &UpdateNodeState{}
	case CmdRemoveNode:
		return &RemoveNode{}
	case CmdCreateActor:
		return &CreateActor{}
	case CmdPlaceActor:
		return &PlaceActor{}
	case CmdActorStarted:
		return &ActorStarted{}
	case CmdActorDied:
		return &ActorDied{}
	case CmdKillActor:
		return &KillActor{}
	case CmdCreatePlacementGroup:
		return &CreatePlacementGroup{}
	case CmdPlaceBundles:
		return &PlaceBundles{}
	case CmdRemovePlacementGroup:
		return &RemovePlacementGroup{}
	case CmdSubmitJob:
		return &SubmitJob{}
	case CmdJobFinished:
		return &JobFinished{}
	case CmdBatch:
		return &Batch{}
	}
	return nil
}

// EncodeCommand returns c as its type byte followed by its msgpack body.
func EncodeCommand(c Command) ([]byte, error) {
	if c == nil || newCommand(c.Type()) == nil {
		return nil, fmt.Errorf("encode command %T: %w", c, ErrUnknownCommand)
	}
	var buf bytes.Buffer
	buf.WriteByte(byte(c.Type()))
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true) // identical commands encode to identical bytes
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode %v: %w", c.Type(), err)
	}
	return buf.Bytes(), nil
}

// MustEncode is EncodeCommand for commands built in code, where an
// encoding failure is a programming error; it panics on error.
func MustEncode(c Command) []byte {
	b, err := EncodeCommand(c)
	if err != nil {
		panic(err)
	}
	return b
}

// NewBatch encodes cmds into one Batch command.
func NewBatch(cmds ...Command) (*Batch, error) {
	b := &Batch{Commands: make([][]byte, 0, len(cmds))}
	for i, c := range cmds {
		if _, ok := c.(*Batch); ok {
			return nil, fmt.Errorf("batch entry %d: %w: batches do not nest", i, ErrInvalid)
		}
		enc, err := EncodeCommand(c)
		if err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
		b.Commands = append(b.Commands, enc)
	}
	return b, nil
}

// DecodeCommand parses bytes produced by EncodeCommand. It refuses an empty
// input, an unknown type byte, a body that is not the type's msgpack
// encoding, trailing bytes, and a batch holding a batch.
func DecodeCommand(b []byte) (Command, error) {
	return decodeCommand(b, 0)
}

func decodeCommand(b []byte, depth int) (Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrMalformed)
	}
	t := CommandType(b[0])
	c := newCommand(t)
	if c == nil {
		return nil, fmt.Errorf("%w: type byte %d", ErrUnknownCommand, b[0])
	}
	r := bytes.NewReader(b[1:])
	dec := msgpack.NewDecoder(r)
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%w: %v body: %v", ErrMalformed, t, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %v body has %d trailing bytes", ErrMalformed, t, r.Len())
	}
	if bt, ok := c.(*Batch); ok {
		if depth > 0 {
			return nil, fmt.Errorf("%w: batch inside a batch", ErrMalformed)
		}
		bt.decoded = make([]Command, len(bt.Commands))
		for i, sub := range bt.Commands {
			sc, err := decodeCommand(sub, depth+1)
			if err != nil {
				return nil, fmt.Errorf("batch entry %d: %w", i, err)
			}
			bt.decoded[i] = sc
		}
	}
	return c, nil
}
