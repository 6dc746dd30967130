package cuda

import (
	"errors"
	"strings"
	"testing"
)

// These run on machines without a GPU (every machine of this project): the
// CUDA backend must say so and Select must fall back or fail clearly.

func TestSelectCPUForced(t *testing.T) {
	b, note, err := Select("cpu")
	if err != nil || b == nil || b.Name() != "cpu" {
		t.Fatalf("Select(cpu) = %v, %q, %v; want the cpu backend", b, note, err)
	}
}

func TestSelectBadName(t *testing.T) {
	if _, _, err := Select("tpu"); !errors.Is(err, ErrBackendName) {
		t.Fatalf("Select(tpu): %v, want ErrBackendName", err)
	}
}

func TestSelectWithoutGPU(t *testing.T) {
	ok, reason := Available()
	if strings.Contains(reason, "\n") || reason == "" {
		t.Fatalf("Available reason must be one non-empty line, got %q", reason)
	}
	if ok {
		t.Skipf("a CUDA device is present (%s): see the cudagpu tests", reason)
	}
	b, note, err := Select("")
	if err != nil || b == nil || b.Name() != "cpu" || !strings.Contains(note, "unavailable") {
		t.Fatalf("auto Select without a GPU = %v, %q, %v; want cpu with the reason", b, note, err)
	}
	if _, _, err := Select("cuda"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("forced cuda without a GPU: %v, want ErrUnavailable", err)
	}
	if _, err := New(0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New(0) without a GPU: %v, want ErrUnavailable", err)
	}
	t.Logf("Available() = false, %q; Select note %q", reason, note)
}
