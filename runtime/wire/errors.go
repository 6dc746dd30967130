package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/runtime/api"
)

// encodeError is api's error codec in msgpack: the error's sentinels and
// structured fields travel, so errors.Is and errors.As keep working
// across processes.
func encodeError(err error) []byte {
	b, merr := msgpack.Marshal(api.Encode(err))
	if merr != nil { // cannot happen for this struct; keep the message
		b, _ = msgpack.Marshal(&api.Error{Msg: err.Error()})
	}
	return b
}

// decodeError is the inverse of encodeError.
func decodeError(b []byte) error {
	var e api.Error
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("%w: reply error: %v", ErrMalformed, err)
	}
	return e.Err()
}
