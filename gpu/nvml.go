package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is the part of the NVML library the inventory uses. nvml.Interface
// (the real library, from nvml.New) satisfies it, and so do go-nvml's mock
// servers, which is how tests and simulated profiles inject devices.
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
	DeviceGetNvLinkRemoteDeviceType(device nvml.Device, link int) (nvml.IntNvLinkDeviceType, nvml.Return)
}

// ErrNVML reports that NVML is present but failed in a way that is not
// "no GPUs here" (for example no permission on the device nodes).
var ErrNVML = errors.New("gpu: NVML error")

// errPanic is the NVML return used when a query panicked: go-nvml's mocks
// panic on calls without an implementation, and a broken driver may too.
// It is outside NVML's own range so it never collides with a real code.
const errPanic nvml.Return = 10_000

// retString names an NVML return code without needing the library loaded.
func retString(r nvml.Return) string {
	if r == errPanic {
		return "query panicked (not implemented)"
	}
	return nvml.ErrorString(r)
}

// call runs one NVML query and turns a panic into a failed return, so one
// misbehaving call loses one field instead of the process.
func call[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			var zero T
			v, ret = zero, errPanic
		}
	}()
	return f()
}

// call2 is call for queries that return two values.
func call2[A, B any](f func() (A, B, nvml.Return)) (a A, b B, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			var za A
			var zb B
			a, b, ret = za, zb, errPanic
		}
	}()
	return f()
}

// initLibrary calls Init, guarding against a panic on dlopen failure (some
// go-nvml versions panic instead of returning ERROR_LIBRARY_NOT_FOUND).
func initLibrary(lib NVML) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_LIBRARY_NOT_FOUND
		}
	}()
	return lib.Init()
}

// noGPUs reports whether an Init failure means "this machine has no usable
// NVIDIA GPU", a normal state rather than an error.
func noGPUs(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NOT_FOUND, nvml.ERROR_FUNCTION_NOT_FOUND:
		return true
	}
	return false
}

// nvmlErr wraps a failed return with what was being done.
func nvmlErr(what string, ret nvml.Return) error {
	return fmt.Errorf("%s: %w: %s", what, ErrNVML, retString(ret))
}

// cString converts a NUL-terminated C char array (as NVML fills them).
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// normBusID puts a PCI bus id into one canonical form: lower case with a
// four-digit domain. NVML reports "00000000:18:00.0" in PciInfo.BusId and
// "0000:18:00.0" in the legacy field; both must compare equal.
func normBusID(s string) string {
	// Iterate to a fixed point so odd input (spaces inside the domain)
	// normalizes the same however often it is applied; each change
	// shortens the string, so this ends.
	for {
		n := normBusIDOnce(s)
		if n == s {
			return n
		}
		s = n
	}
}

func normBusIDOnce(s string) string {
	b := []byte(strings.TrimSpace(s))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A' // ASCII only: bus ids are hex
		}
	}
	dom, rest, ok := strings.Cut(string(b), ":")
	if !ok {
		return string(b)
	}
	if len(dom) > 4 && strings.Trim(dom[:len(dom)-4], "0") == "" {
		dom = dom[len(dom)-4:]
	}
	return strings.TrimSpace(dom + ":" + rest)
}

// busIDOf extracts the bus id of a PciInfo, preferring the full field.
func busIDOf(p nvml.PciInfo) string {
	if id := cString(p.BusId[:]); id != "" {
		return normBusID(id)
	}
	return normBusID(cString(p.BusIdLegacy[:]))
}

// setCString writes s into a C char array, NUL-terminated (used by the
// simulated devices to fill PciInfo like the driver does).
func setCString(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}
