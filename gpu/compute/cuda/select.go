package cuda

import (
	"fmt"
	"strings"
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
