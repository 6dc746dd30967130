package objstore

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// ID names an object.
type ID [16]byte

// String is the ID in hex.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Key is an object's secret: presenting it is what allows fetching or
// releasing the object.
type Key [16]byte

// Ref is a reference to an object that an owner process holds.
type Ref struct {
	ID    ID
	Key   Key
	Owner string // the owner's transfer address, host:port
	Size  int64  // the object's size in bytes
}

// Limits of a Ref.
const (
	// MaxObjectSize bounds an object (1 TiB): a larger size in a reference
	// or a response is malformed.
	MaxObjectSize = 1 << 40
	maxOwnerLen   = 255
)

// refMagic begins every encoded Ref. 0xc1 is never used by msgpack, so no
// encoded value begins with it.
const refMagic = "\xc1TOBJREF1"

var (
	// ErrBadRef: bytes that claim to be a reference do not decode as one.
	ErrBadRef = errors.New("malformed object reference")
)

// IsRef reports whether b is an encoded Ref rather than an encoded value.
func IsRef(b []byte) bool {
	return len(b) >= len(refMagic) && string(b[:len(refMagic)]) == refMagic
}

// Encode returns the reference's encoding, which travels in place of the
// value: magic | id | key | uvarint size | uvarint len(owner) | owner.
func (r Ref) Encode() []byte {
	b := make([]byte, 0, len(refMagic)+32+2*binary.MaxVarintLen64+len(r.Owner))
	b = append(b, refMagic...)
	b = append(b, r.ID[:]...)
	b = append(b, r.Key[:]...)
	b = binary.AppendUvarint(b, uint64(r.Size))
	b = binary.AppendUvarint(b, uint64(len(r.Owner)))
	return append(b, r.Owner...)
}

// DecodeRef decodes an encoded Ref; malformed input gives an error wrapping
// ErrBadRef, never a panic.
func DecodeRef(b []byte) (Ref, error) {
	var r Ref
	if !IsRef(b) {
		return r, fmt.Errorf("%w: no reference marker", ErrBadRef)
	}
	b = b[len(refMagic):]
	if len(b) < 32 {
		return r, fmt.Errorf("%w: %d bytes, too short for id and key", ErrBadRef, len(b))
	}
	copy(r.ID[:], b[:16])
	copy(r.Key[:], b[16:32])
	b = b[32:]
	size, n := binary.Uvarint(b)
	if n <= 0 || size > MaxObjectSize {
		return r, fmt.Errorf("%w: object %s: bad size", ErrBadRef, r.ID)
	}
	b = b[n:]
	olen, n := binary.Uvarint(b)
	if n <= 0 || olen == 0 || olen > maxOwnerLen || olen != uint64(len(b)-n) {
		return r, fmt.Errorf("%w: object %s: bad owner address", ErrBadRef, r.ID)
	}
	r.Size = int64(size)
	r.Owner = string(b[n:])
	return r, nil
}

// newIDKey returns a random ID and key.
func newIDKey() (ID, Key) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("objstore: crypto/rand failed: %v", err)) // no randomness: nothing can work
	}
	var id ID
	var k Key
	copy(id[:], b[:16])
	copy(k[:], b[16:])
	return id, k
}
