// Package cuda is troupe's CUDA compute backend: gpu.Backend and
// gpu.DecoderBackend (the Llama/Qwen family's ops) implemented with CUDA C++
// kernels (kernels/*.cu) compiled to PTX by NVRTC, committed under ptx/ and
// embedded, and run through the CUDA driver API, which is loaded at run time
// with dlopen (github.com/ebitengine/purego, no cgo).
//
// Use Select to get the backend a process should use: TROUPE_BACKEND=cpu or
// =cuda forces one; otherwise CUDA is used when Available reports a usable
// device and the CPU backend (gpu/cpu) otherwise, with a one-line reason.
//
// No machine of the project has a GPU, so the kernels are verified on the
// CPU: emu/csrc/cuda_emu.h is a small CUDA emulation layer under which the same,
// unchanged .cu files compile with g++ and run one OS thread per CUDA
// thread; the test behind the `cudaemu` build tag runs the whole Backend on
// it and compares every op with gpu/cpu's reference kernels. The `cudagpu`
// tag holds the same checks against a real device. See README.md.
package cuda
