package cuda

import (
	"errors"
	"testing"
)

func TestVisibleOrdinal(t *testing.T) {
	for _, c := range []struct {
		idx     int
		visible string
		want    int
		err     bool
	}{
		{idx: 3, visible: "", want: 3},
		{idx: 3, visible: "1,3", want: 1},
		{idx: 1, visible: " 1 , 3", want: 0},
		{idx: 2, visible: "1,3", err: true},
		{idx: 3, visible: "1,x,3", err: true}, // CUDA stops at the first invalid entry
		{idx: 0, visible: "GPU-abc", err: true},
	} {
		got, err := visibleOrdinal(c.idx, c.visible)
		if c.err {
			if !errors.Is(err, ErrNoSuchGPU) {
				t.Errorf("visibleOrdinal(%d, %q) = %d, %v; want ErrNoSuchGPU", c.idx, c.visible, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("visibleOrdinal(%d, %q) = %d, %v; want %d", c.idx, c.visible, got, err, c.want)
		}
	}
}

func TestFormatUUID(t *testing.T) {
	var u [16]byte
	copy(u[:], "troupe-emulator!")
	if got, want := formatUUID(u), "GPU-74726f75-7065-2d65-6d75-6c61746f7221"; got != want {
		t.Fatalf("formatUUID = %q, want %q", got, want)
	}
}
