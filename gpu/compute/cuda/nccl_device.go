package cuda

import (
	"fmt"
	"unsafe"

	"troupe/gpu/compute"
)

// This file is what a collective group on GPUs (package nccl's Group)
// needs of the backend: device addresses of its buffers, copies to and
// from host memory, and the device's context for NCCL's calls. *Backend
// has nccl.Device's methods without importing package nccl.

// DevicePointer returns the device address and the element count of x, a
// *Buffer (float32 elements) or *BF16Buffer (bfloat16 elements) of this
// backend, for NCCL (or another library) to read and write in place.
func (b *Backend) DevicePointer(x any) (ptr uintptr, n int, err error) {
	switch x := x.(type) {
	case *Buffer:
		if x != nil && x.owner == b && !x.root.freed {
			return x.ptr, x.n, nil
		}
	case *BF16Buffer:
		if x != nil && x.owner == b && !x.root.freed {
			return x.ptr, x.n, nil
		}
	}
	return 0, 0, fmt.Errorf("DevicePointer: %w", compute.ErrBuffer)
}

// OnDevice runs fn on one OS thread with the device's CUDA context
// current, as NCCL's calls need; the backend's work is on the legacy
// default stream (0). On the emulator fn just runs.
func (b *Backend) OnDevice(fn func() error) error {
	if d, ok := b.dev.(*driverDevice); ok {
		return d.withCtx(fn)
	}
	return fn()
}

// CopyToHost copies len(dst) bytes from device address src (after the
// queued work, which the copy waits for on the default stream).
func (b *Backend) CopyToHost(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return b.dev.DtoH(unsafe.Pointer(&dst[0]), src, len(dst))
}

// CopyFromHost copies src to device address dst.
func (b *Backend) CopyFromHost(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return b.dev.HtoD(dst, unsafe.Pointer(&src[0]), len(src))
}
