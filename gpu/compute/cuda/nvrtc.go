package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoNVRTC is returned when the NVRTC shared library cannot be loaded.
var ErrNoNVRTC = errors.New("cuda: NVRTC library not available")

// nvrtcLibNames are tried in order; TROUPE_NVRTC overrides them. Debian's
// libnvrtc11.2 package ships libnvrtc.so.11.2 (CUDA 11.8 builtins).
var nvrtcLibNames = []string{"libnvrtc.so.11.2", "libnvrtc.so.12", "libnvrtc.so"}

type nvrtcAPI struct {
	version        func(major, minor *int32) int32
	createProgram  func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	compileProgram func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	destroyProgram func(prog *uintptr) int32
	getPTXSize     func(prog uintptr, size *uint64) int32
	getPTX         func(prog uintptr, buf *byte) int32
	getCUBINSize   func(prog uintptr, size *uint64) int32 // nil before 11.1
	getCUBIN       func(prog uintptr, buf *byte) int32
	getLogSize     func(prog uintptr, size *uint64) int32
	getLog         func(prog uintptr, buf *byte) int32
	errorString    func(res int32) string
}

var (
	nvrtcOnce sync.Once
	nvrtcLib  *nvrtcAPI
	nvrtcErr  error
)

// loadNVRTC dlopens NVRTC once and binds the functions this package uses.
func loadNVRTC() (*nvrtcAPI, error) {
	nvrtcOnce.Do(func() {
		names := nvrtcLibNames
		if p := os.Getenv("TROUPE_NVRTC"); p != "" {
			names = []string{p}
		}
		var h uintptr
		var errs []string
		for _, n := range names {
			var err error
			h, err = purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				break
			}
			errs = append(errs, err.Error())
		}
		if h == 0 {
			nvrtcErr = fmt.Errorf("%w: %s", ErrNoNVRTC, strings.Join(errs, "; "))
			return
		}
		api := &nvrtcAPI{}
		bind := func(fptr any, name string, required bool) {
			if nvrtcErr != nil {
				return
			}
			sym, err := purego.Dlsym(h, name)
			if err != nil {
				if required {
					nvrtcErr = fmt.Errorf("%w: symbol %s: %v", ErrNoNVRTC, name, err)
				}
				return
			}
			purego.RegisterFunc(fptr, sym)
		}
		bind(&api.version, "nvrtcVersion", true)
		bind(&api.createProgram, "nvrtcCreateProgram", true)
		bind(&api.compileProgram, "nvrtcCompileProgram", true)
		bind(&api.destroyProgram, "nvrtcDestroyProgram", true)
		bind(&api.getPTXSize, "nvrtcGetPTXSize", true)
		bind(&api.getPTX, "nvrtcGetPTX", true)
		bind(&api.getCUBINSize, "nvrtcGetCUBINSize", false)
		bind(&api.getCUBIN, "nvrtcGetCUBIN", false)
		bind(&api.getLogSize, "nvrtcGetProgramLogSize", true)
		bind(&api.getLog, "nvrtcGetProgramLog", true)
		bind(&api.errorString, "nvrtcGetErrorString", true)
		if nvrtcErr == nil {
			nvrtcLib = api
		}
	})
	return nvrtcLib, nvrtcErr
}

// NVRTCVersion reports the loaded NVRTC version, or an error wrapping
// ErrNoNVRTC when the library is missing.
func NVRTCVersion() (major, minor int, err error) {
	api, err := loadNVRTC()
	if err != nil {
		return 0, 0, err
	}
	var ma, mi int32
	if r := api.version(&ma, &mi); r != 0 {
		return 0, 0, fmt.Errorf("nvrtcVersion: %s", api.errorString(r))
	}
	return int(ma), int(mi), nil
}

// CompileResult is the output of one NVRTC compilation.
type CompileResult struct {
	PTX   []byte // set when the target is a virtual architecture (compute_XX)
	CUBIN []byte // set when the target is a real architecture (sm_XX)
	Log   string // compiler log (warnings, and ptxas -v output for CUBIN)
}

// cStrings builds a NULL-free array of C string pointers; the returned
// keep-alive slice must outlive the call that uses the array.
func cStrings(ss []string) (unsafe.Pointer, [][]byte, []*byte) {
	if len(ss) == 0 {
		return nil, nil, nil
	}
	bufs := make([][]byte, len(ss))
	ptrs := make([]*byte, len(ss))
	for i, s := range ss {
		bufs[i] = append([]byte(s), 0)
		ptrs[i] = &bufs[i][0]
	}
	return unsafe.Pointer(&ptrs[0]), bufs, ptrs
}

// Header is an in-memory header handed to NVRTC (there are no CUDA include
// directories on the build machines).
type Header struct {
	Name string // include name, e.g. "common.cuh"
	Code string
}

// Compile compiles one CUDA C++ source with NVRTC. arch is either a virtual
// architecture ("compute_80": PTX) or a real one ("sm_80": CUBIN, whose log
// carries ptxas register/spill statistics when opts asks for -v).
func Compile(src, name string, headers []Header, arch string, opts ...string) (*CompileResult, error) {
	api, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	cubin := strings.HasPrefix(arch, "sm_")
	if cubin && api.getCUBIN == nil {
		return nil, fmt.Errorf("compile %s for %s: this NVRTC has no nvrtcGetCUBIN", name, arch)
	}
	var prog uintptr
	hdrNames := make([]string, len(headers))
	hdrCode := make([]string, len(headers))
	for i, h := range headers {
		hdrNames[i], hdrCode[i] = h.Name, h.Code
	}
	codePtr, codeBufs, codePtrs := cStrings(hdrCode)
	namePtr, nameBufs, namePtrs := cStrings(hdrNames)
	r0 := api.createProgram(&prog, src, name, int32(len(headers)), codePtr, namePtr)
	runtime.KeepAlive(codeBufs)
	runtime.KeepAlive(codePtrs)
	runtime.KeepAlive(nameBufs)
	runtime.KeepAlive(namePtrs)
	if r := r0; r != 0 {
		return nil, fmt.Errorf("compile %s: nvrtcCreateProgram: %s", name, api.errorString(r))
	}
	defer api.destroyProgram(&prog)
	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	optPtr, bufs, ptrs := cStrings(all)
	r := api.compileProgram(prog, int32(len(all)), optPtr)
	runtime.KeepAlive(bufs)
	runtime.KeepAlive(ptrs)
	res := &CompileResult{Log: programLog(api, prog)}
	if r != 0 {
		return res, fmt.Errorf("compile %s for %s: %s\n%s", name, arch, api.errorString(r), res.Log)
	}
	var size uint64
	if cubin {
		if r := api.getCUBINSize(prog, &size); r != 0 {
			return res, fmt.Errorf("compile %s: nvrtcGetCUBINSize: %s", name, api.errorString(r))
		}
		res.CUBIN = make([]byte, size)
		if size > 0 {
			if r := api.getCUBIN(prog, &res.CUBIN[0]); r != 0 {
				return res, fmt.Errorf("compile %s: nvrtcGetCUBIN: %s", name, api.errorString(r))
			}
		}
		if api.getPTXSize(prog, &size) != 0 {
			return res, nil
		}
	}
	if r := api.getPTXSize(prog, &size); r != 0 {
		return res, fmt.Errorf("compile %s: nvrtcGetPTXSize: %s", name, api.errorString(r))
	}
	buf := make([]byte, size)
	if size > 0 {
		if r := api.getPTX(prog, &buf[0]); r != 0 {
			return res, fmt.Errorf("compile %s: nvrtcGetPTX: %s", name, api.errorString(r))
		}
	}
	// The PTX size includes the terminating NUL.
	res.PTX = []byte(strings.TrimRight(string(buf), "\x00"))
	return res, nil
}

func programLog(api *nvrtcAPI, prog uintptr) string {
	var size uint64
	if api.getLogSize(prog, &size) != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, size)
	if api.getLog(prog, &buf[0]) != 0 {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00")
}
