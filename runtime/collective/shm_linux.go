//go:build linux

package collective

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const shmSupported = true

// The futex operations (linux/futex.h), shared between processes.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// shmSeals are the seals a segment carries before it is passed: its size
// is fixed, so the peer cannot shrink it under this process (a mapped page
// past the end would fault).
const shmSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newShmSegment makes a segment with rings of ringBytes: a sealed memfd,
// mapped here. The caller passes fd to the peer and closes it.
func newShmSegment(ringBytes int) (seg *shmSegment, fd int, err error) {
	size := shmSegmentSize(ringBytes)
	fd, err = unix.MemfdCreate("troupe-collective", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("collective shared memory: memfd_create: %w", err)
	}
	fail := func(what string, err error) (*shmSegment, int, error) {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("collective shared memory: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shmSeals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	writeShmHeader(mem, ringBytes)
	return &shmSegment{mem: mem, ringBytes: ringBytes, dialler: true}, fd, nil
}

// mapShmSegment maps the segment fd a peer passed, after checking that it
// is sealed against shrinking and that its header matches its size. The
// caller closes fd.
func mapShmSegment(fd int) (*shmSegment, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: shared segment: not a memfd: %v", ErrFrame, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("%w: shared segment not sealed against shrinking", ErrFrame)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("collective shared memory: fstat: %w", err)
	}
	if st.Size < shmPage || st.Size > int64(shmSegmentSize(1<<30)) {
		return nil, fmt.Errorf("%w: shared segment of %d bytes", ErrFrame, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("collective shared memory: mmap: %w", err)
	}
	n, err := readShmHeader(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &shmSegment{mem: mem, ringBytes: n}, nil
}

func (s *shmSegment) release() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

func closeFD(fd int) { unix.Close(fd) }

// futexWait sleeps while *w == val, for at most d (shared, not private:
// the word is in memory mapped by two processes).
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on w, in any process.
func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(1<<30), 0, 0, 0)
}

// unixRights is the control message that passes fd.
func unixRights(fd int) []byte { return unix.UnixRights(fd) }

// parseRights returns the descriptors a control message passed.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}
