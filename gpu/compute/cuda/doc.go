// Package cuda is troupe's CUDA compute backend: compute.Backend (the
// Llama/Qwen family's ops) implemented with CUDA C++ kernels (kernels/*.cu)
// compiled to PTX by NVRTC, committed under ptx/ and embedded, and run
// through the CUDA driver API, which is loaded at run time with dlopen
// (github.com/ebitengine/purego, no cgo).
//
// Programs get a backend from gpu/compute/backends: ForPlacement (an actor
// on the GPU it was placed on, found here with OpenPlaced) or Select (a
// process on device 0). The mode the user asked for (read at the edge:
// --backend, defaulting to TROUPE_BACKEND) "cpu" or "cuda" forces one;
// otherwise CUDA is used when a usable device is there and the CPU backend
// (gpu/compute/cpu) otherwise, with a one-line reason.
//
// Three variables are read here, where the CUDA driver itself reads its
// configuration, lazily at first use and never at package initialisation:
// CUDA_VISIBLE_DEVICES (libcuda renumbers devices by it in this very
// process, so mapping a placed GPU to an ordinal must read the same value),
// and TROUPE_LIBCUDA and TROUPE_NVRTC, which locate the shared libraries as
// LD_LIBRARY_PATH would. An actor's process is a worker started by its node
// with the node's environment, so no edge of the worker could pass them
// down without every program repeating the read.
//
// No machine of the project has a GPU, so the kernels are verified on the
// CPU: emu/csrc/cuda_emu.h is a small CUDA emulation layer under which the same,
// unchanged .cu files compile with g++ and run one OS thread per CUDA
// thread; the test behind the `cudaemu` build tag runs the whole Backend on
// it and compares every op with gpu/compute/cpu's reference kernels. The `cudagpu`
// tag holds the same checks against a real device. See README.md.
package cuda
