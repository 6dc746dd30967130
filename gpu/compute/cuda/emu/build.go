// Package emu builds the CUDA emulator: the unchanged kernel sources of
// gpu/compute/cuda compiled with g++ against a small CUDA emulation layer
// (cuda_emu.h, emu_runtime.cpp) into one shared library, which also exports
// a fake libcuda (fake_libcuda.cpp) so that the production driver code of
// gpu/compute/cuda runs on the CPU. It is test infrastructure: gpu/compute/cuda's own tests
// use it op by op, and tests elsewhere (a policy actor placed on a GPU) point
// TROUPE_LIBCUDA, or cuda.WithDriver, at the library to run end to end
// without a GPU.
//
// The package does not import gpu/compute/cuda (whose tests import it): callers pass
// the kernel sources, which gpu/compute/cuda exposes as cuda.Sources and
// cuda.Headers.
package emu

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

//go:embed csrc/cuda_emu.h csrc/emu_runtime.cpp csrc/fake_libcuda.cpp csrc/selftest.cu
var files embed.FS

// ErrNoCompiler is returned when g++ is missing.
var ErrNoCompiler = errors.New("emu: g++ not found")

// File is a named source text.
type File struct {
	Name string
	Code string
}

// Kernel is one .cu file and its extern "C" __global__ entry points.
type Kernel struct {
	Name    string // base name without .cu
	Code    string
	Entries []string
}

// Options tune a build.
type Options struct {
	// CXXFlags are added to every compile and the link, e.g.
	// "-fsanitize=thread".
	CXXFlags []string
	// Jobs is the number of parallel compiles (0: 2).
	Jobs int
}

// Build compiles the emulator, the kernels and the emulator's self-test into
// dir/libtroupe_cuda_emu.so and returns its path. headers are written into
// dir so the kernels' #include lines find them.
func Build(dir string, kernels []Kernel, headers []File, opt Options) (string, error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCompiler, err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("emu: %w", err)
	}
	write := func(name, code string) (string, error) {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(code), 0o644); err != nil {
			return "", fmt.Errorf("emu: write %s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"cuda_emu.h", "emu_runtime.cpp", "fake_libcuda.cpp", "selftest.cu"} {
		b, err := files.ReadFile("csrc/" + name)
		if err != nil {
			return "", fmt.Errorf("emu: %w", err)
		}
		if _, err := write(name, string(b)); err != nil {
			return "", err
		}
	}
	for _, h := range headers {
		if _, err := write(h.Name, h.Code); err != nil {
			return "", err
		}
	}
	// -O1: as fast as -O2 for these small launches, and the runtime's
	// std::thread/std::barrier code compiles in half the time.
	flags := append([]string{"-std=c++20", "-O1", "-fPIC", "-pthread", "-Wall", "-Wno-unknown-pragmas", "-Werror", "-I", src}, opt.CXXFlags...)
	type unit struct{ src, obj string }
	units := []unit{
		{filepath.Join(src, "emu_runtime.cpp"), filepath.Join(dir, "emu_runtime.o")},
		{filepath.Join(src, "fake_libcuda.cpp"), filepath.Join(dir, "fake_libcuda.o")},
	}
	// One translation unit per .cu file: the unchanged source plus one
	// registration line per kernel; the self-test kernel likewise.
	all := append(append([]Kernel{}, kernels...), Kernel{Name: "selftest", Entries: []string{"emu_selftest", "emu_selftest_tc"}})
	for _, k := range all {
		cu := filepath.Join(src, k.Name+".cu")
		if k.Code != "" {
			if cu, err = write(k.Name+".cu", k.Code); err != nil {
				return "", err
			}
		}
		var sb strings.Builder
		sb.WriteString("#include \"cuda_emu.h\"\n")
		fmt.Fprintf(&sb, "#include %q\n", cu)
		for _, e := range k.Entries {
			fmt.Fprintf(&sb, "EMU_REGISTER(%s)\n", e)
		}
		cpp, err := write(k.Name+"_emu.cpp", sb.String())
		if err != nil {
			return "", err
		}
		units = append(units, unit{cpp, filepath.Join(dir, k.Name+".o")})
	}
	jobs := opt.Jobs
	if jobs <= 0 {
		jobs = 2 // the CI machine has two cores
	}
	errs := make([]error, len(units))
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	for i, u := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append(append([]string{}, flags...), "-c", u.src, "-o", u.obj)
			if out, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("emu: g++ %s: %v\n%s", filepath.Base(u.src), err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	lib := filepath.Join(dir, "libtroupe_cuda_emu.so")
	args := append([]string{"-shared", "-pthread", "-o", lib}, opt.CXXFlags...)
	for _, u := range units {
		args = append(args, u.obj)
	}
	if out, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("emu: link: %v\n%s", err, out)
	}
	return lib, nil
}
