// Package scripts holds the repository's shell scripts; its tests run the
// parts of them that need neither a GPU nor minutes of benchmarks.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUCheckNoGPU: without nvidia-smi on PATH, gpu-check.sh run prints
// one line and exits 0; an unknown command is a usage error.
func TestGPUCheckNoGPU(t *testing.T) {
	empty := t.TempDir() // PATH holds only the tools the script needs
	for _, tool := range []string{"bash", "dirname", "grep"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found", tool)
		}
		if err := os.Symlink(p, filepath.Join(empty, tool)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "gpu-check.sh", "run", t.TempDir())
	cmd.Env = []string{"PATH=" + empty}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh run without a GPU: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "no NVIDIA GPU") {
		t.Fatalf("want one line saying there is no GPU, got %q", out)
	}
	err = exec.Command("bash", "gpu-check.sh", "nosuchcommand").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("unknown command: %v, want exit status 2", err)
	}
}

// TestGPUCheckSummary: the summary pairs each Go benchmark with its
// PyTorch peer of the same unit and gives their ratio, median over rounds.
func TestGPUCheckSummary(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	dir := t.TempDir()
	goLog := filepath.Join(dir, "go.log")
	os.WriteFile(goLog, []byte(`### round 1
BenchmarkGPUGemm/4096cubed-16         	       3	   1000 ns/op	   400.0 TFLOP/s
BenchmarkGPUQwen/decode-batch1-16 	3	100 ns/op	3.0 step-ms	300 tokens/s
### round 2
BenchmarkGPUGemm/4096cubed-16         	       3	   1000 ns/op	   600.0 TFLOP/s
`), 0o644)
	torchLog := filepath.Join(dir, "torch.jsonl")
	os.WriteFile(torchLog, []byte(`{"round": 1, "bench": "Gemm/4096cubed", "mode": "eager", "value": 700.0, "unit": "TFLOP/s"}
{"round": 2, "bench": "Gemm/4096cubed", "mode": "eager", "value": 700.0, "unit": "TFLOP/s"}
{"round": 1, "bench": "Gemm/4096cubed", "mode": "compile", "value": 1000.0, "unit": "TFLOP/s"}
{"round": 1, "bench": "Qwen/decode-batch1", "mode": "eager", "value": 600.0, "unit": "tokens/s"}
`), 0o644)
	out := filepath.Join(dir, "summary.md")
	if b, err := exec.Command(py, "gpu_check_torch.py", "summary", "--go", goLog, "--torch", torchLog, "--out", out, "--device", "TestGPU").CombinedOutput(); err != nil {
		t.Fatalf("summary: %v\n%s", err, b)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Gemm/4096cubed | 500 TFLOP/s | 700 TFLOP/s | 0.71× | 1e+03 TFLOP/s | 0.50× |",
		"| Qwen/decode-batch1 | 300 tokens/s | 600 tokens/s | 0.50× |",
		"# GPU check summary (TestGPU)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
}

// TestShellcheck runs shellcheck over every script in scripts/ (skipped
// where shellcheck is not installed).
func TestShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not installed")
	}
	scripts, err := filepath.Glob("*.sh")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	if out, err := exec.Command(sc, scripts...).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}
