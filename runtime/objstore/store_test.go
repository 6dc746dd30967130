package objstore

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestStoreRefcounts(t *testing.T) {
	s := NewStore("owner:1")
	data := []byte("some object bytes")
	ref := s.Put(data)
	if ref.Owner != "owner:1" || ref.Size != int64(len(data)) || s.Len() != 1 || s.Bytes() != int64(len(data)) {
		t.Fatalf("after Put: ref %+v, len %d, bytes %d", ref, s.Len(), s.Bytes())
	}
	if got, err := s.Get(ref.ID, ref.Key); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if err := s.Retain(ref.ID, ref.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ref.ID, ref.Key); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("freed with a reference left")
	}
	// A transfer in progress holds the object past its last reference.
	got, done, err := s.acquire(ref.ID, ref.Key)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("acquire = %q, %v", got, err)
	}
	if err := s.Release(ref.ID, ref.Key); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("freed during a transfer")
	}
	done()
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("not freed when unreferenced: len %d, bytes %d", s.Len(), s.Bytes())
	}
	_, err = s.Get(ref.ID, ref.Key)
	if !errors.Is(err, ErrFreed) || !strings.Contains(err.Error(), ref.ID.String()) || !strings.Contains(err.Error(), "freed") {
		t.Errorf("Get after free: %v, want ErrFreed naming the object", err)
	}
	if err := s.Release(ref.ID, ref.Key); !errors.Is(err, ErrFreed) {
		t.Errorf("second release: %v, want ErrFreed", err)
	}
	var unknown ID
	unknown[0] = 7
	if _, err := s.Get(unknown, ref.Key); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown ID: %v, want ErrUnknown", err)
	}
}

func TestStoreWrongKey(t *testing.T) {
	s := NewStore("o:1")
	ref := s.Put([]byte("x"))
	bad := ref.Key
	bad[3] ^= 1
	if _, err := s.Get(ref.ID, bad); !errors.Is(err, ErrUnknown) {
		t.Errorf("wrong key: %v, want ErrUnknown", err)
	}
	if err := s.Release(ref.ID, bad); !errors.Is(err, ErrUnknown) || s.Len() != 1 {
		t.Errorf("release with a wrong key: %v (len %d)", err, s.Len())
	}
}

// TestStoreForgetsOldFrees: the memory of freed IDs is bounded.
func TestStoreForgetsOldFrees(t *testing.T) {
	s := NewStore("o:1")
	first := s.Put([]byte("a"))
	s.Release(first.ID, first.Key)
	for range freedMemory {
		r := s.Put([]byte("b"))
		s.Release(r.ID, r.Key)
	}
	if len(s.freed) != freedMemory || len(s.ring) != freedMemory {
		t.Fatalf("freed memory %d/%d, want %d", len(s.freed), len(s.ring), freedMemory)
	}
	if _, err := s.Get(first.ID, first.Key); !errors.Is(err, ErrUnknown) {
		t.Errorf("long-freed ID: %v, want ErrUnknown", err)
	}
}

func TestStoreConcurrent(t *testing.T) {
	s := NewStore("o:1")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ref := s.Put(make([]byte, g+i%7))
				for range 3 {
					if err := s.Retain(ref.ID, ref.Key); err != nil {
						t.Error(err)
						return
					}
				}
				var inner sync.WaitGroup
				for range 4 {
					inner.Add(1)
					go func() {
						defer inner.Done()
						_, done, err := s.acquire(ref.ID, ref.Key)
						if err == nil {
							done()
						}
						s.Release(ref.ID, ref.Key)
					}()
				}
				inner.Wait()
			}
		}()
	}
	wg.Wait()
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after every reference was released: len %d, bytes %d", s.Len(), s.Bytes())
	}
}

func TestRefEncoding(t *testing.T) {
	s := NewStore("127.0.0.1:4242")
	ref := s.Put(make([]byte, 1000))
	enc := ref.Encode()
	if !IsRef(enc) || enc[0] != 0xc1 {
		t.Fatalf("encoding %x is not recognised as a reference", enc)
	}
	got, err := DecodeRef(enc)
	if err != nil || got != ref {
		t.Fatalf("DecodeRef = %+v, %v; want %+v", got, err, ref)
	}
	for _, bad := range [][]byte{nil, {0x93, 1, 2, 3}, enc[:len(enc)-1], append(append([]byte{}, enc...), 0), enc[:20]} {
		if _, err := DecodeRef(bad); !errors.Is(err, ErrBadRef) {
			t.Errorf("DecodeRef(%x) = %v, want ErrBadRef", bad, err)
		}
	}
}

func TestStoreList(t *testing.T) {
	s := NewStore("here")
	a := s.PutTagged(make([]byte, 10), "actor-a")
	b := s.Put(make([]byte, 20))
	if err := s.Retain(b.ID, b.Key); err != nil {
		t.Fatal(err)
	}
	list, total := s.List(0)
	if total != 2 || len(list) != 2 {
		t.Fatalf("List: %d of %d, want 2 of 2", len(list), total)
	}
	byID := map[string]ObjectInfo{}
	for _, o := range list {
		byID[o.ID] = o
	}
	if o := byID[a.ID.String()]; o.Size != 10 || o.Refs != 1 || o.Tag != "actor-a" || o.CreatedAt == 0 {
		t.Errorf("object a: %+v", o)
	}
	if o := byID[b.ID.String()]; o.Size != 20 || o.Refs != 2 || o.Tag != "" {
		t.Errorf("object b: %+v", o)
	}
	if list[0].ID > list[1].ID {
		t.Errorf("not ordered by ID: %s, %s", list[0].ID, list[1].ID)
	}
	if one, total := s.List(1); len(one) != 1 || total != 2 || one[0].ID != list[0].ID {
		t.Errorf("List(1) = %v of %d", one, total)
	}
	s.Release(a.ID, a.Key)
	if _, total := s.List(0); total != 1 {
		t.Errorf("after freeing a: %d objects listed, want 1", total)
	}
}
