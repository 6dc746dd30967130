// Package nccl loads NVIDIA's collective library, NCCL (libnccl.so.2),
// with dlopen through purego, as package cuda loads the driver: for
// collective groups whose members are all on GPUs, whose buffers NCCL
// reduces on the devices over NVLink or the network.
//
// Open makes a Group: the device side of a collective group
// (package troupe/actors/collective). Every member opens it together; when
// every member is on a GPU and its NCCL loads, rank 0's unique ID goes to
// the others over the group's own broadcast, ncclCommInitRank forms the
// communicator, and the Group's calls run NCCL on device addresses.
// Otherwise (a member off GPUs, the library absent, the communicator not
// formed) every member takes the host path: the device buffer is copied to
// host memory, reduced over the group's links, and copied back.
//
// NCCL does not notice a member that dies mid-call: the others wait for
// it forever. So every call on the NCCL path runs under a watchdog that
// watches the call's context (its deadline), a Liveness (by default the
// collective group's own failure, which its heartbeats notice between
// calls too; or one the caller passes to Open with WithLiveness, Members
// being one it feeds with the deaths it learns of) and
// ncclCommGetAsyncError; when one fires it calls
// ncclCommAbort and fails the call with an error matching
// collective.ErrMemberLost, a *collective.MemberError naming the member
// when that is known. The group is then broken (Group). Forming the
// communicator in Open is watched the same way where NCCL can form it
// without blocking (2.14 and later); an older NCCL blocks in
// ncclCommInitRank with no way out.
//
// troupe ships no NCCL, and none was at hand where this package was
// written: it has never run against a real NCCL. It is tested against a
// fake libnccl (testdata/fake_nccl.c: one-rank communicators, host
// pointers, a collective that can be made to hang until aborted) that
// checks the calling convention and the watchdog, and on the CUDA emulator;
// scripts/gpu-check.sh has a step for the first machine with both.
//
// The package sits in the ML half (beside the CUDA backend that owns device
// buffers); the runtime half's collectives never import it.
package nccl

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable: libnccl.so.2 is not installed (or lacks a symbol).
var ErrUnavailable = errors.New("nccl: unavailable")

// Env names a library to load instead of libnccl.so.2.
const Env = "TROUPE_LIBNCCL"

// UniqueID is ncclUniqueId: rank 0 makes it and every member passes it to
// CommInitRank (the group's Broadcast carries it).
type UniqueID struct{ Internal [128]byte }

// Comm is an ncclComm_t.
type Comm uintptr

// DataType is ncclDataType_t.
type DataType int32

// The data types troupe reduces.
const (
	Float32  DataType = 7 // ncclFloat32
	BFloat16 DataType = 9 // ncclBfloat16
)

// RedOp is ncclRedOp_t.
type RedOp int32

// Reductions.
const (
	Sum RedOp = 0 // ncclSum
	Max RedOp = 2 // ncclMax
	Avg RedOp = 4 // ncclAvg (NCCL 2.10 and later)
)

// Lib is a loaded NCCL.
type Lib struct {
	path    string
	version int32

	getVersion    func(v *int32) int32
	getUniqueID   func(id *UniqueID) int32
	commInitRank  func(comm *Comm, n int32, id UniqueID, rank int32) int32
	commDestroy   func(c Comm) int32
	commAbort     func(c Comm) int32
	allReduce     func(send, recv uintptr, count uintptr, dt DataType, op RedOp, c Comm, stream uintptr) int32
	broadcast     func(send, recv uintptr, count uintptr, dt DataType, root int32, c Comm, stream uintptr) int32
	getErrorStr   func(r int32) *byte
	allGather     func(send, recv uintptr, count uintptr, dt DataType, c Comm, stream uintptr) int32
	reduceScatter func(send, recv uintptr, count uintptr, dt DataType, op RedOp, c Comm, stream uintptr) int32
	asyncError    func(c Comm, res *int32) int32
	// commInitRankConfig is NCCL 2.14's ncclCommInitRankConfig, nil in an
	// older library: the only way to form a communicator without blocking.
	commInitRankConfig func(comm *Comm, n int32, id UniqueID, rank int32, cfg *commConfig) int32
}

// commConfig is the head of ncclConfig_t as NCCL 2.14 defined it (what
// NCCL_CONFIG_INITIALIZER sets, then blocking). NCCL copies size bytes of
// it over its own defaults, checks magic, and takes the fields that
// version had (a later library resets the ones added since), so a newer
// NCCL reads it as it is.
type commConfig struct {
	size           uintptr
	magic          uint32
	version        uint32
	blocking       int32
	cgaClusterSize int32 // NCCL_CONFIG_UNDEF_INT: NCCL's default
}

const (
	configMagic   = 0xcafebeef
	configVersion = 21400 // NCCL_VERSION(2, 14, 0)
	configUndef   = -1 << 31
)

// Result codes of NCCL (ncclResult_t) that the watchdog tells apart.
const (
	resultSystemError = 2 // ncclSystemError: a system or network call failed
	resultRemoteError = 6 // ncclRemoteError: a remote rank failed or its connection broke
	resultInProgress  = 7 // ncclInProgress: a non-blocking operation is still running
)

var (
	loadMu sync.Mutex // guards loads
	loads  = map[string]loaded{}
)

type loaded struct {
	lib *Lib
	err error
}

// Load loads NCCL once per process: TROUPE_LIBNCCL, or libnccl.so.2.
func Load() (*Lib, error) {
	p := os.Getenv(Env)
	if p == "" {
		p = "libnccl.so.2"
	}
	return LoadFrom(p)
}

// LoadFrom loads the library at path (once per path).
func LoadFrom(path string) (*Lib, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if l, ok := loads[path]; ok {
		return l.lib, l.err
	}
	lib, err := bind(path)
	loads[path] = loaded{lib, err}
	return lib, err
}

func bind(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, path, err)
	}
	l := &Lib{path: path}
	for _, s := range []struct {
		fptr any
		name string
	}{
		{&l.getVersion, "ncclGetVersion"}, {&l.getUniqueID, "ncclGetUniqueId"},
		{&l.commInitRank, "ncclCommInitRank"}, {&l.commDestroy, "ncclCommDestroy"},
		{&l.commAbort, "ncclCommAbort"}, {&l.allReduce, "ncclAllReduce"},
		{&l.broadcast, "ncclBroadcast"}, {&l.allGather, "ncclAllGather"},
		{&l.reduceScatter, "ncclReduceScatter"}, {&l.getErrorStr, "ncclGetErrorString"},
		{&l.asyncError, "ncclCommGetAsyncError"},
	} {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s lacks %s", ErrUnavailable, path, s.name)
		}
		purego.RegisterFunc(s.fptr, sym)
	}
	if sym, err := purego.Dlsym(h, "ncclCommInitRankConfig"); err == nil {
		purego.RegisterFunc(&l.commInitRankConfig, sym)
	}
	if err := l.check("ncclGetVersion", l.getVersion(&l.version)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return l, nil
}

// Version is NCCL's version code (e.g. 22005 for 2.20.5).
func (l *Lib) Version() int { return int(l.version) }

func (l *Lib) check(what string, r int32) error {
	if r == 0 {
		return nil
	}
	msg := fmt.Sprintf("ncclResult %d", r)
	if l.getErrorStr != nil {
		if s := l.getErrorStr(r); s != nil {
			n := 0
			for *(*byte)(unsafe.Add(unsafe.Pointer(s), n)) != 0 {
				n++
			}
			msg = string(unsafe.Slice(s, n)) + fmt.Sprintf(" (ncclResult %d)", r)
		}
	}
	return fmt.Errorf("nccl: %s: %s", what, msg)
}

// GetUniqueID makes the ID rank 0 hands the others.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	return id, l.check("ncclGetUniqueId", l.getUniqueID(&id))
}

// CommInitRank joins the communicator of n ranks that id names, as rank,
// on the current CUDA device.
func (l *Lib) CommInitRank(n int, id UniqueID, rank int) (Comm, error) {
	var c Comm
	return c, l.check("ncclCommInitRank", l.commInitRank(&c, int32(n), id, int32(rank)))
}

// NonblockingInit reports whether the library forms communicators
// without blocking (ncclCommInitRankConfig: NCCL 2.14 and later).
func (l *Lib) NonblockingInit() bool { return l.commInitRankConfig != nil }

// CommInitRankNonblocking starts joining the communicator of n ranks that
// id names, as rank, on the current CUDA device, and returns at once: the
// communicator is formed when AsyncError reports 0 rather than
// ncclInProgress, and is aborted (Abort) if the wait is given up.
func (l *Lib) CommInitRankNonblocking(n int, id UniqueID, rank int) (Comm, error) {
	if l.commInitRankConfig == nil {
		return 0, fmt.Errorf("%w: %s has no ncclCommInitRankConfig (NCCL 2.14)", ErrUnavailable, l.path)
	}
	cfg := commConfig{size: unsafe.Sizeof(commConfig{}), magic: configMagic, version: configVersion, blocking: 0, cgaClusterSize: configUndef}
	var c Comm
	if r := l.commInitRankConfig(&c, int32(n), id, int32(rank), &cfg); r != 0 && r != resultInProgress {
		return c, l.check("ncclCommInitRankConfig", r)
	}
	return c, nil
}

// AllReduce reduces count elements of dt at device address send into recv
// (they may be the same) on stream.
func (l *Lib) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, c Comm, stream uintptr) error {
	return l.check("ncclAllReduce", l.allReduce(send, recv, uintptr(count), dt, op, c, stream))
}

// Broadcast copies root's count elements to every rank's recv.
func (l *Lib) Broadcast(send, recv uintptr, count int, dt DataType, root int, c Comm, stream uintptr) error {
	return l.check("ncclBroadcast", l.broadcast(send, recv, uintptr(count), dt, int32(root), c, stream))
}

// AllGather gathers every rank's count elements into recv, in rank order.
func (l *Lib) AllGather(send, recv uintptr, count int, dt DataType, c Comm, stream uintptr) error {
	return l.check("ncclAllGather", l.allGather(send, recv, uintptr(count), dt, c, stream))
}

// ReduceScatter reduces and leaves rank r with the r-th count elements.
func (l *Lib) ReduceScatter(send, recv uintptr, count int, dt DataType, op RedOp, c Comm, stream uintptr) error {
	return l.check("ncclReduceScatter", l.reduceScatter(send, recv, uintptr(count), dt, op, c, stream))
}

// AsyncError is ncclCommGetAsyncError: the error NCCL's own threads met
// on the communicator since it formed (remote ranks failing, connections
// breaking), as a result code (0: none; ncclInProgress: none yet), which
// the caller checks while it waits for a call. It is meant to be called
// from another thread than the one that waits.
func (l *Lib) AsyncError(c Comm) (int32, error) {
	var res int32
	if err := l.check("ncclCommGetAsyncError", l.asyncError(c, &res)); err != nil {
		return 0, err
	}
	return res, nil
}

// Abort ends the communicator without waiting for pending operations: what
// a member does when the group loses another member.
func (l *Lib) Abort(c Comm) error { return l.check("ncclCommAbort", l.commAbort(c)) }

// Destroy frees the communicator.
func (l *Lib) Destroy(c Comm) error { return l.check("ncclCommDestroy", l.commDestroy(c)) }

// Path is how a group moves GPU buffers.
type Path int

const (
	// HostPath copies GPU buffers to host memory and reduces them over the
	// group's ring.
	HostPath Path = iota
	// NCCLPath reduces them on the devices with NCCL.
	NCCLPath
)

func (p Path) String() string {
	if p == NCCLPath {
		return "nccl"
	}
	return "host"
}

// Choose picks the path of a group: NCCL when every member's buffers are
// on a GPU and the library loads, else the host path; why says which and
// why, for the logs.
func Choose(allOnGPUs bool, load func() (*Lib, error)) (p Path, lib *Lib, why string) {
	if !allOnGPUs {
		return HostPath, nil, "not every member is on a GPU"
	}
	lib, err := load()
	if err != nil {
		return HostPath, nil, err.Error()
	}
	return NCCLPath, lib, fmt.Sprintf("NCCL %d from %s", lib.version, lib.path)
}
