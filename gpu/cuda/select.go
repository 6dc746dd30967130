package cuda

import (
	"errors"
	"fmt"
	"strings"

	"troupe/gpu"
	"troupe/gpu/cpu"
)

// Available reports whether the CUDA backend can run here: the driver
// library loads, cuInit succeeds, the driver accepts PTX ISA 7.8 (CUDA
// 11.8) and device 0 has compute capability >= 8.0. reason is one line,
// e.g. "cuda: unavailable: no NVIDIA driver (...)" or
// "cuda:0 (NVIDIA A100-SXM4-80GB, sm_80)". The driver library is loaded
// once per process; the device probe is cheap and not cached.
func Available() (ok bool, reason string) {
	api, err := loadDriver()
	if err != nil {
		return false, oneLine(err.Error())
	}
	info, err := probeDevice(api, 0)
	if err != nil {
		return false, oneLine(err.Error())
	}
	return true, fmt.Sprintf("cuda:0 (%s, sm_%d%d)", info.name, info.major, info.minor)
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// New opens CUDA device ordinal and loads the kernels. It fails with an
// error wrapping ErrUnavailable when there is no usable driver or device.
func New(ordinal int) (*Backend, error) {
	dev, err := openDriverDevice(driverPath(), ordinal)
	if err != nil {
		return nil, err
	}
	b, err := newBackend(dev, gpuLaunch)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return b, nil
}

// ErrBackendName reports an unknown backend name (--backend,
// TROUPE_BACKEND).
var ErrBackendName = errors.New("unknown backend")

// Select returns the compute backend this process should use and a one-line
// note saying which and why. mode is what the user asked for, read at the
// edge (a --backend flag defaulting to TROUPE_BACKEND): "cpu" forces the CPU
// backend; "cuda" forces CUDA and fails with a clear error when it is
// unavailable; "" or "auto" picks CUDA when Available and the CPU backend
// otherwise.
func Select(mode string) (gpu.Backend, string, error) {
	switch v := strings.ToLower(strings.TrimSpace(mode)); v {
	case "cpu":
		return cpu.New(), "cpu (backend cpu asked for)", nil
	case "cuda":
		b, err := New(0)
		if err != nil {
			return nil, "", fmt.Errorf("backend cuda: %w", err)
		}
		return b, b.Name() + " (backend cuda asked for)", nil
	case "", "auto":
		if ok, reason := Available(); !ok {
			return cpu.New(), "cpu (" + reason + ")", nil
		}
		b, err := New(0)
		if err != nil {
			return cpu.New(), "cpu (" + oneLine(err.Error()) + ")", nil
		}
		return b, b.Name(), nil
	default:
		return nil, "", fmt.Errorf("%w %q: want cpu, cuda or auto", ErrBackendName, v)
	}
}
