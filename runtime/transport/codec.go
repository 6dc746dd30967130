// Package transport is the wire layer of a troupe cluster: gRPC with a
// msgpack codec (registered with encoding.RegisterCodec under the name
// "msgpack"), hand-written service descriptors, per-RPC cluster-token
// credentials with server interceptors that refuse an RPC without the token
// (codes.Unauthenticated), and message size limits on both ends.
//
// Every message type is a plain Go struct with msgpack tags; no protobuf is
// involved. Dial and NewServer set up the codec, the token and the limits so
// callers cannot forget one of them.
package transport

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content-subtype of the msgpack codec
// ("application/grpc+msgpack").
const CodecName = "msgpack"

// ErrMalformed: a message's bytes are not a valid msgpack encoding of the
// expected type.
var ErrMalformed = errors.New("malformed msgpack message")

// Codec is the msgpack gRPC codec. The zero value is ready to use.
type Codec struct{}

func init() { encoding.RegisterCodec(Codec{}) }

// Name implements encoding.Codec.
func (Codec) Name() string { return CodecName }

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("msgpack encode %T: %w", v, err)
	}
	return b, nil
}

// Unmarshal implements encoding.Codec. It never panics on bad input: the
// msgpack decoder reports malformed or truncated data as errors, and a
// panic from a hostile frame (deep nesting, absurd lengths) is turned into
// an error wrapping ErrMalformed.
func (Codec) Unmarshal(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("msgpack decode %T: %w: %v", v, ErrMalformed, r)
		}
	}()
	if err := msgpack.Unmarshal(data, v); err != nil {
		return fmt.Errorf("msgpack decode %T: %w: %v", v, ErrMalformed, err)
	}
	return nil
}
