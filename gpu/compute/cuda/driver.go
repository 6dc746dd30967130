package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable reports that no usable CUDA driver or device is present.
var ErrUnavailable = errors.New("cuda: unavailable")

// driverAPI is the subset of the CUDA driver API (libcuda.so.1) the backend
// uses, bound with purego. All functions return a CUresult (0 = success).
type driverAPI struct {
	init           func(flags uint32) int32
	driverVersion  func(v *int32) int32
	deviceGetCount func(n *int32) int32
	deviceGet      func(dev *int32, ordinal int32) int32
	deviceGetName  func(name *byte, n int32, dev int32) int32
	deviceGetAttr  func(v *int32, attr int32, dev int32) int32
	primaryRetain  func(ctx *uintptr, dev int32) int32
	primaryRelease func(dev int32) int32
	ctxSetCurrent  func(ctx uintptr) int32
	ctxSynchronize func() int32
	moduleLoadData func(mod *uintptr, image unsafe.Pointer) int32
	moduleUnload   func(mod uintptr) int32
	moduleGetFunc  func(fn *uintptr, mod uintptr, name string) int32
	memAlloc       func(p *uintptr, bytes uint64) int32
	memFree        func(p uintptr) int32
	memcpyHtoD     func(dst uintptr, src unsafe.Pointer, n uint64) int32
	memcpyDtoH     func(dst unsafe.Pointer, src uintptr, n uint64) int32
	memcpyDtoD     func(dst, src uintptr, n uint64) int32
	memsetD32      func(dst uintptr, v uint32, n uint64) int32
	launchKernel   func(fn uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params, extra unsafe.Pointer) int32
	getErrorString func(res int32, s **byte) int32
	// deviceGetUUID is cuDeviceGetUuid_v2 (or cuDeviceGetUuid on drivers
	// before 11.4); nil when the driver has neither.
	deviceGetUUID func(uuid *[16]byte, dev int32) int32
}

const (
	attrCCMajor = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
)

type driverLoad struct {
	api *driverAPI
	err error
}

var (
	driverMu    sync.Mutex
	driverLoads = map[string]driverLoad{}
)

// driverPath is the driver library: libcuda.so.1, or TROUPE_LIBCUDA.
func driverPath() string {
	if p := os.Getenv("TROUPE_LIBCUDA"); p != "" {
		return p
	}
	return "libcuda.so.1"
}

// loadDriver dlopens the driver library and cuInit's it, once per path (the
// tests load a fake driver built on the CPU emulator from a temp path).
func loadDriver() (*driverAPI, error) { return loadDriverFrom(driverPath()) }

func loadDriverFrom(name string) (*driverAPI, error) {
	driverMu.Lock()
	defer driverMu.Unlock()
	if l, ok := driverLoads[name]; ok {
		return l.api, l.err
	}
	api, err := bindDriver(name)
	driverLoads[name] = driverLoad{api, err}
	return api, err
}

func bindDriver(name string) (*driverAPI, error) {
	h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: no NVIDIA driver (%v)", ErrUnavailable, err)
	}
	api := &driverAPI{}
	syms := []struct {
		fptr any
		name string
	}{
		{&api.init, "cuInit"}, {&api.driverVersion, "cuDriverGetVersion"},
		{&api.deviceGetCount, "cuDeviceGetCount"}, {&api.deviceGet, "cuDeviceGet"},
		{&api.deviceGetName, "cuDeviceGetName"}, {&api.deviceGetAttr, "cuDeviceGetAttribute"},
		{&api.primaryRetain, "cuDevicePrimaryCtxRetain"}, {&api.primaryRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&api.ctxSetCurrent, "cuCtxSetCurrent"}, {&api.ctxSynchronize, "cuCtxSynchronize"},
		{&api.moduleLoadData, "cuModuleLoadData"}, {&api.moduleUnload, "cuModuleUnload"},
		{&api.moduleGetFunc, "cuModuleGetFunction"},
		{&api.memAlloc, "cuMemAlloc_v2"}, {&api.memFree, "cuMemFree_v2"},
		{&api.memcpyHtoD, "cuMemcpyHtoD_v2"}, {&api.memcpyDtoH, "cuMemcpyDtoH_v2"},
		{&api.memcpyDtoD, "cuMemcpyDtoD_v2"}, {&api.memsetD32, "cuMemsetD32_v2"},
		{&api.launchKernel, "cuLaunchKernel"}, {&api.getErrorString, "cuGetErrorString"},
	}
	for _, s := range syms {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s lacks %s (driver too old?)", ErrUnavailable, name, s.name)
		}
		purego.RegisterFunc(s.fptr, sym)
	}
	for _, n := range []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"} {
		if sym, err := purego.Dlsym(h, n); err == nil {
			purego.RegisterFunc(&api.deviceGetUUID, sym)
			break
		}
	}
	if r := api.init(0); r != 0 {
		return nil, fmt.Errorf("%w: cuInit: %s", ErrUnavailable, api.errString(r))
	}
	return api, nil
}

func (a *driverAPI) errString(r int32) string {
	var s *byte
	if a.getErrorString(r, &s) != 0 || s == nil {
		return fmt.Sprintf("CUresult %d", r)
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(s), n)) != 0 {
		n++
	}
	return fmt.Sprintf("%s (CUresult %d)", string(unsafe.Slice(s, n)), r)
}

func (a *driverAPI) check(what string, r int32) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", what, a.errString(r))
}

// deviceInfo describes one CUDA device.
type deviceInfo struct {
	ordinal      int
	name         string
	major, minor int
}

// deviceUUIDs returns the UUID of every device the driver shows this process
// (after CUDA_VISIBLE_DEVICES), in ordinal order, in NVML's text form
// ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), so they can be compared with
// the UUIDs the node's NVML inventory reports.
func deviceUUIDs(api *driverAPI) ([]string, error) {
	if api.deviceGetUUID == nil {
		return nil, fmt.Errorf("%w: the driver has no cuDeviceGetUuid", ErrUnavailable)
	}
	var n int32
	if err := api.check("cuDeviceGetCount", api.deviceGetCount(&n)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	out := make([]string, n)
	for i := range out {
		var dev int32
		if err := api.check("cuDeviceGet", api.deviceGet(&dev, int32(i))); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		var u [16]byte
		if err := api.check("cuDeviceGetUuid", api.deviceGetUUID(&u, dev)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		out[i] = formatUUID(u)
	}
	return out, nil
}

// formatUUID writes 16 bytes as NVML does: GPU-8-4-4-4-12 lowercase hex.
func formatUUID(u [16]byte) string {
	h := fmt.Sprintf("%x", u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// minDriverVersion is CUDA 11.8, whose PTX ISA (7.8) NVRTC 11.8 emits.
const minDriverVersion = 11080

func probeDevice(api *driverAPI, ordinal int) (deviceInfo, error) {
	var ver int32
	if err := api.check("cuDriverGetVersion", api.driverVersion(&ver)); err != nil {
		return deviceInfo{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if ver < minDriverVersion {
		return deviceInfo{}, fmt.Errorf("%w: the NVIDIA driver supports CUDA %d.%d; the kernels' PTX needs 11.8 or newer",
			ErrUnavailable, ver/1000, ver%1000/10)
	}
	var n int32
	if err := api.check("cuDeviceGetCount", api.deviceGetCount(&n)); err != nil {
		return deviceInfo{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if n == 0 {
		return deviceInfo{}, fmt.Errorf("%w: the driver sees no CUDA device", ErrUnavailable)
	}
	if ordinal < 0 || ordinal >= int(n) {
		return deviceInfo{}, fmt.Errorf("%w: device %d requested, %d present", ErrUnavailable, ordinal, n)
	}
	var dev, major, minor int32
	if err := api.check("cuDeviceGet", api.deviceGet(&dev, int32(ordinal))); err != nil {
		return deviceInfo{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	name := make([]byte, 256)
	_ = api.deviceGetName(&name[0], int32(len(name)), dev)
	_ = api.deviceGetAttr(&major, attrCCMajor, dev)
	_ = api.deviceGetAttr(&minor, attrCCMinor, dev)
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	info := deviceInfo{ordinal: ordinal, name: string(name), major: int(major), minor: int(minor)}
	if major < 8 {
		return info, fmt.Errorf("%w: device %d (%s) has compute capability %d.%d; the kernels need >= 8.0",
			ErrUnavailable, ordinal, info.name, major, minor)
	}
	return info, nil
}

// driverDevice is the device interface on a real GPU: the primary context of
// one device, the embedded PTX modules loaded (JIT-compiled by the driver),
// and one function handle per kernel. Work goes to the default stream, so
// ops run in issue order; Sync is cuCtxSynchronize.
type driverDevice struct {
	api     *driverAPI
	info    deviceInfo
	dev     int32
	ctx     uintptr
	modules []uintptr
	funcs   map[string]uintptr
}

func openDriverDevice(lib string, ordinal int) (*driverDevice, error) {
	api, err := loadDriverFrom(lib)
	if err != nil {
		return nil, err
	}
	info, err := probeDevice(api, ordinal)
	if err != nil {
		return nil, err
	}
	d := &driverDevice{api: api, info: info, funcs: map[string]uintptr{}}
	if err := api.check("cuDeviceGet", api.deviceGet(&d.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := api.check("cuDevicePrimaryCtxRetain", api.primaryRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	arch := "sm_80"
	if info.major >= 9 {
		arch = "sm_90"
	}
	srcs, err := Sources()
	if err != nil {
		d.Close()
		return nil, err
	}
	err = d.withCtx(func() error {
		for _, s := range srcs {
			ptx, err := EmbeddedPTX(s.Name, arch)
			if err != nil {
				return err
			}
			img := append(append([]byte{}, ptx...), 0) // NUL-terminated
			var mod uintptr
			r := api.moduleLoadData(&mod, unsafe.Pointer(&img[0]))
			runtime.KeepAlive(img)
			if err := api.check("cuModuleLoadData "+arch+"/"+s.Name, r); err != nil {
				return err
			}
			d.modules = append(d.modules, mod)
			for _, k := range s.Kernels {
				var fn uintptr
				if err := api.check("cuModuleGetFunction "+k, api.moduleGetFunc(&fn, mod, k)); err != nil {
					return err
				}
				d.funcs[k] = fn
			}
		}
		return nil
	})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("cuda: load kernels: %w", err)
	}
	return d, nil
}

// withCtx runs f on one OS thread with the device's context current (a CUDA
// context is per thread; goroutines migrate between threads).
func (d *driverDevice) withCtx(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.api.check("cuCtxSetCurrent", d.api.ctxSetCurrent(d.ctx)); err != nil {
		return err
	}
	return f()
}

func (d *driverDevice) Name() string {
	return fmt.Sprintf("cuda:%d (%s, sm_%d%d)", d.info.ordinal, d.info.name, d.info.major, d.info.minor)
}

func (d *driverDevice) Alloc(bytes int) (uintptr, error) {
	var p uintptr
	err := d.withCtx(func() error { return d.api.check("cuMemAlloc", d.api.memAlloc(&p, uint64(bytes))) })
	return p, err
}

func (d *driverDevice) Free(p uintptr) error {
	return d.withCtx(func() error { return d.api.check("cuMemFree", d.api.memFree(p)) })
}

func (d *driverDevice) HtoD(dst uintptr, src unsafe.Pointer, n int) error {
	return d.withCtx(func() error { return d.api.check("cuMemcpyHtoD", d.api.memcpyHtoD(dst, src, uint64(n))) })
}

func (d *driverDevice) DtoH(dst unsafe.Pointer, src uintptr, n int) error {
	return d.withCtx(func() error { return d.api.check("cuMemcpyDtoH", d.api.memcpyDtoH(dst, src, uint64(n))) })
}

func (d *driverDevice) DtoD(dst, src uintptr, n int) error {
	return d.withCtx(func() error { return d.api.check("cuMemcpyDtoD", d.api.memcpyDtoD(dst, src, uint64(n))) })
}

func (d *driverDevice) Memset32(dst uintptr, v uint32, count int) error {
	return d.withCtx(func() error { return d.api.check("cuMemsetD32", d.api.memsetD32(dst, v, uint64(count))) })
}

func (d *driverDevice) Launch(kernel string, grid, block [3]uint32, args []unsafe.Pointer) error {
	fn, ok := d.funcs[kernel]
	if !ok {
		return fmt.Errorf("no kernel %q in the loaded modules", kernel)
	}
	var params unsafe.Pointer
	if len(args) > 0 {
		params = unsafe.Pointer(&args[0])
	}
	return d.withCtx(func() error {
		r := d.api.launchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, 0, params, nil)
		return d.api.check("cuLaunchKernel "+kernel, r)
	})
}

func (d *driverDevice) Sync() error {
	return d.withCtx(func() error { return d.api.check("cuCtxSynchronize", d.api.ctxSynchronize()) })
}

func (d *driverDevice) Close() error {
	var errs []error
	if d.ctx != 0 {
		errs = append(errs, d.withCtx(func() error {
			for _, m := range d.modules {
				_ = d.api.moduleUnload(m)
			}
			return nil
		}))
		errs = append(errs, d.api.check("cuDevicePrimaryCtxRelease", d.api.primaryRelease(d.dev)))
		d.ctx, d.modules = 0, nil
	}
	return errors.Join(errs...)
}
