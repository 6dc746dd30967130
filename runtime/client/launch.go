package client

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// Launch is what a driver puts in an actor's ActorSpec.Args: the actor's
// spec and the job binary that hosts it. A node runs one worker process
// per job from the binary and asks it to construct the actor. With Hash
// set the binary is the one uploaded with that sha256 (UploadBinary);
// otherwise Binary is a path on the node's machine (single-machine
// clusters, nodes without a data dir).
type Launch struct {
	Spec   actors.Spec `msgpack:"spec"`
	Binary string      `msgpack:"bin,omitempty"`
	Hash   string      `msgpack:"hash,omitempty"`
	Args   []string    `msgpack:"args,omitempty"`
}

// EncodeLaunch encodes l for ActorSpec.Args.
func EncodeLaunch(l *Launch) ([]byte, error) {
	b, err := msgpack.Marshal(l)
	if err != nil {
		return nil, fmt.Errorf("encode launch of %s: %w", l.Spec.Type, err)
	}
	return b, nil
}

// DecodeLaunch decodes ActorSpec.Args.
func DecodeLaunch(b []byte) (*Launch, error) {
	l := new(Launch)
	if err := msgpack.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("decode launch: %w", err)
	}
	if (l.Binary == "" && l.Hash == "") || l.Spec.Type == "" {
		return nil, fmt.Errorf("decode launch: no binary or actor type")
	}
	return l, nil
}
