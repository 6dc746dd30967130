package scheduler

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range testCluster() {
		f.Add(MustEncode(c))
	}
	spec := ActorSpecN(1, 2)
	spec.Request.Affinity = &Affinity{Node: "n", Soft: true}
	spec.Request.Resources.Custom = CustomResources{"tpu": 1}
	seeds := []Command{
		&CreateActor{Spec: spec, Placement: &Placement{Node: "n", GPUs: []GPUAlloc{{0, 1}, {1, 1}}, Bundle: AnyBundle}, At: 3},
		&PlaceActor{Actor: "a", Placement: Placement{Node: "n"}},
		&ActorDied{Actor: "a", Incarnation: 2, Cause: "oom"},
		&CreatePlacementGroup{Spec: GroupSpec{ID: "g", Strategy: StrictSpread, Bundles: gpuBundles(2, 1)}, Bundles: []BundlePlacement{{0, "n", []GPUAlloc{{3, 1}}}}},
		&JobFinished{Job: "j", State: JobFailed, Message: "boom"},
		&UpdateNodeState{Node: "n", State: NodeDead},
	}
	for _, c := range seeds {
		f.Add(MustEncode(c))
	}
	bt, _ := NewBatch(seeds...)
	f.Add(MustEncode(bt))
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add([]byte{byte(CmdBatch), 0x91, 0xc4, 0x01, byte(CmdBatch)})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrUnknownCommand", err)
			}
			return
		}
		// What decodes re-encodes to something that decodes to the same
		// command, and applying it never panics.
		b1 := MustEncode(c)
		c2, err := DecodeCommand(b1)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if b2 := MustEncode(c2); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable:\n%x\n%x", b1, b2)
		}
		s := NewState()
		for _, rc := range testCluster() {
			_ = s.Apply(rc)
		}
		_ = s.Apply(c)
		checkInvariants(t, s)
	})
}

func TestDecodeCommandErrors(t *testing.T) {
	cases := []struct {
		data []byte
		want error
		text string
	}{
		{nil, ErrMalformed, "empty input"},
		{[]byte{0}, ErrUnknownCommand, "type byte 0"},
		{[]byte{99, 0x80}, ErrUnknownCommand, "type byte 99"},
		{[]byte{byte(CmdRegisterNode), 0x92}, ErrMalformed, "RegisterNode body"},
		{append(MustEncode(&RemoveNode{Node: "n"}), 1, 2), ErrMalformed, "2 trailing bytes"},
	}
	for _, tc := range cases {
		_, err := DecodeCommand(tc.data)
		if !errors.Is(err, tc.want) || !bytes.Contains([]byte(err.Error()), []byte(tc.text)) {
			t.Errorf("decode %x: %v, want %v containing %q", tc.data, err, tc.want, tc.text)
		}
	}
	inner := MustEncode(&Batch{Commands: [][]byte{MustEncode(&RemoveNode{Node: "n"})}})
	if _, err := DecodeCommand(MustEncode(&Batch{Commands: [][]byte{inner}})); !errors.Is(err, ErrMalformed) {
		t.Errorf("nested batch: %v", err)
	}
	if _, err := NewBatch(&Batch{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewBatch with a batch: %v", err)
	}
}

func FuzzUnmarshalState(f *testing.F) {
	for _, seed := range []int64{41, 42} {
		_, s := randomLog(f, seed, 60)
		f.Add(snapshotBytes(f, s))
	}
	f.Add([]byte{snapshotVersion})
	f.Add([]byte{snapshotVersion, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewState()
		if err := s.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// A restored state is consistent and usable.
		checkInvariants(t, s)
		p := Planner{}
		_, _ = p.Place(s, Request{Resources: Resources{GPUs: 2}})
		cmds, _ := p.PlanPending(s, 1)
		for _, c := range cmds {
			if err := s.Apply(c); err != nil {
				t.Fatalf("planned command refused on a restored state: %v", err)
			}
		}
		for _, n := range s.Nodes() {
			_ = s.Apply(&UpdateNodeState{Node: n.ID, State: NodeDead})
		}
		checkInvariants(t, s)
	})
}

func TestRestoreRefusesInconsistentState(t *testing.T) {
	_, s := randomLog(t, 43, 100)
	for _, n := range s.Nodes() {
		if n.State != NodeDead {
			n.Free.MilliCPU++ // corrupt the accounting
			break
		}
	}
	var fresh State
	if err := fresh.UnmarshalBinary(snapshotBytes(t, s)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("restore of a corrupt state: %v", err)
	}
}
