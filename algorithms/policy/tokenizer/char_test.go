package tokenizer

import (
	"errors"
	"slices"
	"testing"
)

func TestByte(t *testing.T) {
	var bt Byte
	s := "héllo\n"
	ids := bt.Encode(s, true)
	if ids[0] != ByteBOS || len(ids) != 1+len(s) {
		t.Fatalf("encode %v", ids)
	}
	if got := bt.Decode(append(ids, ByteEOS, BytePAD, ByteSEP), false); got != s {
		t.Fatalf("byte round trip %q", got)
	}
	if bt.Vocab() != 260 {
		t.Fatal("byte vocab")
	}
}

// TestCharIDs pins the character tokenizer's ids: checkpoints of
// from-scratch models depend on them.
func TestCharIDs(t *testing.T) {
	ct, err := NewChar(DefaultAlphabet)
	if err != nil {
		t.Fatal(err)
	}
	if ct.Vocab() != 64 {
		t.Fatalf("default alphabet vocab %d, want 64", ct.Vocab())
	}
	for i, r := range []rune(DefaultAlphabet) {
		if got := ct.Encode(string(r), false); !slices.Equal(got, []int32{int32(5 + i)}) {
			t.Fatalf("%q: %v, want [%d]", r, got, 5+i)
		}
	}
	if got := ct.Encode("go 2 x=1; Z", true); !slices.Equal(got, []int32{1, 11, 19, 41, 33, 41, 28, 53, 32, 46, 41, 4}) {
		t.Fatalf("encode %v", got)
	}
	specials := []struct {
		got  func() (int32, bool)
		want int32
	}{{ct.PAD, 0}, {ct.BOS, 1}, {ct.EOS, 2}}
	for _, s := range specials {
		if id, ok := s.got(); !ok || id != s.want {
			t.Fatalf("special %d, %v, want %d", id, ok, s.want)
		}
	}
	if ct.SEP() != 3 || CharUNK != 4 {
		t.Fatal("SEP or UNK moved")
	}
	ids := ct.Encode("go 2 x=1; Z", false)
	if got := ct.Decode(append(ids, CharEOS, CharSEP), true); got != "go 2 x=1; ?" {
		t.Fatalf("char round trip %q", got)
	}
}

func TestCharBadAlphabet(t *testing.T) {
	for _, a := range []string{"abca", "", "a\xffb"} {
		if _, err := NewChar(a); !errors.Is(err, ErrAlphabet) {
			t.Errorf("alphabet %q: %v", a, err)
		}
	}
}
