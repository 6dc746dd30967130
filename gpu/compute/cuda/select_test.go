package cuda

import (
	"errors"
	"strings"
	"testing"
)

// These run on machines without a GPU (every machine of this project): the
// CUDA backend must say so clearly.

func TestAvailableWithoutGPU(t *testing.T) {
	ok, reason := Available()
	if strings.Contains(reason, "\n") || reason == "" {
		t.Fatalf("Available reason must be one non-empty line, got %q", reason)
	}
	if ok {
		t.Skipf("a CUDA device is present (%s): see the cudagpu tests", reason)
	}
	if _, err := New(0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New(0) without a GPU: %v, want ErrUnavailable", err)
	}
	t.Logf("Available() = false, %q", reason)
}
