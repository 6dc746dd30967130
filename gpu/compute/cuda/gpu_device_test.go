//go:build cudagpu

package cuda

import (
	"strings"
	"testing"
)

// Tests for a machine with an NVIDIA GPU (compute capability >= 8.0) and its
// driver: go test -tags cudagpu ./gpu/compute/cuda/...
// ops_test.go runs every kernel against the CPU reference on device 0, and
// TestGPULlamaStep trains a Llama-family policy on it against the CPU
// reference.

// newTestBackend opens CUDA device 0; without one the test fails (the tag
// says a GPU is expected).
func newTestBackend(t testing.TB) *Backend {
	t.Helper()
	b, err := New(0)
	if err != nil {
		t.Fatalf("cudagpu tests need a CUDA device: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func TestGPUAvailable(t *testing.T) {
	ok, reason := Available()
	if !ok {
		t.Fatalf("Available() = false: %s", reason)
	}
	if !strings.HasPrefix(reason, "cuda:0 (") {
		t.Fatalf("reason %q", reason)
	}
	t.Log(reason)
}

func TestGPULlamaStep(t *testing.T) {
	checkLlamaSteps(t, newTestBackend(t))
}
