package client

import (
	"testing"

	"troupe/actors"
)

// FuzzDecodeLaunch: an actor's launch record (ActorSpec.Args, read from the
// replicated state a node receives over the network) never panics the
// decoder; what decodes has a binary and an actor type, and encodes again.
func FuzzDecodeLaunch(f *testing.F) {
	good, err := EncodeLaunch(&Launch{Spec: actors.Spec{Type: "Counter", Name: "c"}, Hash: "ab", Args: []string{"-x"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLaunch(b)
		if err != nil {
			return
		}
		if (l.Binary == "" && l.Hash == "") || l.Spec.Type == "" {
			t.Fatalf("decoded a launch without a binary or type: %+v", l)
		}
		if _, err := EncodeLaunch(l); err != nil {
			t.Fatalf("a decoded launch does not encode: %v", err)
		}
	})
}
