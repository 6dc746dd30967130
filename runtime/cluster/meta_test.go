package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaSize(t *testing.T) {
	long := strings.Repeat("x", 64)
	m := memberMeta{ID: long, Role: RoleServer, GRPC: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", Raft: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", Expect: 5}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > memberlist.MetaMaxSize/2 {
		t.Errorf("largest metadata is %d bytes; memberlist allows %d", len(b), memberlist.MetaMaxSize)
	}
	got, err := decodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := (memberMeta{ID: strings.Repeat("y", 600)}).encode(); err == nil {
		t.Error("oversized metadata accepted")
	}
}

// FuzzDecodeMeta: gossip metadata from the network never panics the
// decoder.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := memberMeta{ID: "n", Role: RoleWorker, GRPC: "1.2.3.4:5"}.encode()
	for _, s := range [][]byte{good, nil, {0xc1}, {0x85}, {0xdf, 0xff, 0xff, 0xff, 0xff}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if _, err := m.encode(); err != nil && len(b) <= memberlist.MetaMaxSize {
			// A decoded value may only fail to re-encode by being too large.
			if !strings.Contains(err.Error(), "bytes") {
				t.Fatalf("re-encode: %v", err)
			}
		}
	})
}
