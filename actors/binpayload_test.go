package actors

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzBinPayload: binPayload accepts exactly what msgpack decodes as a
// []byte filling the whole input, and returns the same bytes.
func FuzzBinPayload(f *testing.F) {
	for _, n := range []int{0, 1, 255, 256, 65535, 65536} {
		b, _ := msgpack.Marshal(bytes.Repeat([]byte{7}, n))
		f.Add(b)
	}
	f.Add([]byte{0xc4})
	f.Add([]byte{0xc5, 0, 1})
	f.Add([]byte{0xc6, 0, 0, 0, 9, 1})
	f.Add([]byte{0xa3, 'a', 'b', 'c'}) // a string
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := binPayload(data)
		if !ok {
			return
		}
		var want []byte
		if err := msgpack.Unmarshal(data, &want); err != nil {
			t.Fatalf("binPayload took %x, which msgpack refuses: %v", data, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("binPayload(%x) = %x, msgpack %x", data, got, want)
		}
		if cap(got) != len(got) {
			t.Fatal("the payload's capacity reaches past it")
		}
	})
}
