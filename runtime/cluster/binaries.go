package cluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/api"

	"troupe/runtime/transport"
)

// Job binaries are stored content-addressed in <data-dir>/binaries/<sha256>:
// a driver uploads its executable to each node once (HasBinary first, so a
// node that has it already is skipped), in chunks, and the node checks the
// hash and that the binary is an ELF executable for its own OS and
// architecture before keeping it.

// ErrWrongPlatform: an uploaded binary is not an executable for this node's
// OS/architecture.
var ErrWrongPlatform = api.ErrWrongPlatform

func validHash(h string) bool {
	b, err := hex.DecodeString(h)
	return err == nil && len(b) == sha256.Size
}

func (n *Node) binariesDir() (string, error) {
	if n.cfg.DataDir == "" {
		return "", fmt.Errorf("node %s has no data dir to store job binaries", n.cfg.NodeID)
	}
	return filepath.Join(n.cfg.DataDir, "binaries"), nil
}

// BinaryPath is where a node keeps the binary with this hash.
func (n *Node) BinaryPath(hash string) (string, error) {
	if !validHash(hash) {
		return "", fmt.Errorf("binary hash %q: want 64 hex digits (sha256)", hash)
	}
	dir, err := n.binariesDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, hash), nil
}

// storePath is where an upload of kind with hash is kept.
func (n *Node) storePath(kind, hash string) (string, error) {
	switch kind {
	case "":
		return n.BinaryPath(hash)
	case kindPackage:
		return n.PackagePath(hash)
	}
	return "", fmt.Errorf("upload of unknown kind %q (a newer client?)", kind)
}

func (c *controlImpl) hasBinary(ctx context.Context, r *HasBinaryRequest) (*HasBinaryResponse, error) {
	p, err := c.node().storePath(r.Kind, r.Hash)
	if err != nil {
		return nil, transport.Status(codes.InvalidArgument, err)
	}
	_, err = os.Stat(p)
	return &HasBinaryResponse{Present: err == nil}, nil
}

func (c *controlImpl) putBinary(ctx context.Context, r *PutBinaryRequest) (*PutBinaryResponse, error) {
	n := c.node()
	p, err := n.storePath(r.Kind, r.Hash)
	if err != nil {
		return nil, transport.Status(codes.InvalidArgument, err)
	}
	if r.Kind == kindPackage && r.Offset+int64(len(r.Data)) > MaxPackageBytes {
		return nil, status.Errorf(codes.InvalidArgument, "working dir %.12s: more than %d MiB", r.Hash, MaxPackageBytes>>20)
	}
	n.binMu.Lock()
	defer n.binMu.Unlock()
	if fi, err := os.Stat(p); err == nil {
		return &PutBinaryResponse{Size: fi.Size()}, nil // already stored
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "binaries dir: %v", err)
	}
	part := p + ".part"
	if r.Offset == 0 {
		os.Remove(part)
	}
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o700)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "store binary: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "store binary: %v", err)
	}
	if fi.Size() != r.Offset {
		return nil, status.Errorf(codes.FailedPrecondition, "binary %s: chunk at offset %d, have %d bytes (restart the upload at 0)", r.Hash[:12], r.Offset, fi.Size())
	}
	if _, err := f.Write(r.Data); err != nil {
		return nil, status.Errorf(codes.Internal, "store binary: %v", err)
	}
	size := r.Offset + int64(len(r.Data))
	if !r.Final {
		return &PutBinaryResponse{Size: size}, nil
	}
	if err := f.Close(); err != nil {
		return nil, status.Errorf(codes.Internal, "store binary: %v", err)
	}
	check := checkBinary
	if r.Kind == kindPackage {
		check = checkPackage
	}
	if err := check(part, r.Hash); err != nil {
		os.Remove(part)
		if errors.Is(err, ErrWrongPlatform) {
			return nil, transport.Status(codes.FailedPrecondition, err)
		}
		return nil, transport.Status(codes.InvalidArgument, err)
	}
	if err := os.Rename(part, p); err != nil {
		return nil, status.Errorf(codes.Internal, "store binary: %v", err)
	}
	n.log.Info("job upload stored", "kind", cmp.Or(r.Kind, "binary"), "hash", r.Hash[:12], "bytes", size)
	return &PutBinaryResponse{Size: size}, nil
}

// checkBinary verifies the file's sha256 and that it runs here.
func checkBinary(path, hash string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hash binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hash {
		return fmt.Errorf("binary content has sha256 %s, not the announced %s", got[:12], hash[:12])
	}
	return checkPlatformAs(path, "the uploaded binary "+hash[:12])
}

// machines maps GOARCH to ELF machine types.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390}

// CheckPlatform reads the executable's ELF header and refuses, with an
// error wrapping ErrWrongPlatform, one built for another OS or
// architecture than this process's.
func CheckPlatform(path string) error { return checkPlatformAs(path, filepath.Base(path)) }

// checkPlatformAs is CheckPlatform naming the file name in messages.
func checkPlatformAs(path, name string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %s is %s", ErrWrongPlatform, name, DescribeFile(name, readHead(path)))
	}
	defer f.Close()
	if goruntime.GOOS != "linux" {
		return fmt.Errorf("%w: nodes on %s cannot run ELF job binaries", ErrWrongPlatform, goruntime.GOOS)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w: %s is an ELF %v, not an executable", ErrWrongPlatform, name, f.Type)
	}
	if want, ok := machines[goruntime.GOARCH]; ok && f.Machine != want {
		return fmt.Errorf("%w: %s is built for %v, this node is %s/%s: rebuild it with GOOS=%s GOARCH=%s go build", ErrWrongPlatform, name, f.Machine, goruntime.GOOS, goruntime.GOARCH, goruntime.GOOS, goruntime.GOARCH)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return fmt.Errorf("%w: %s targets OS ABI %v, this node is linux", ErrWrongPlatform, name, f.OSABI)
	}
	return nil
}

// readHead returns the first bytes of a file (none if unreadable).
func readHead(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, 512)
	n, _ := io.ReadFull(f, b)
	return b[:n]
}

// CheckSubmittable is the client's check of a file given to troupe submit
// as the driver binary: an ELF file passes (the node checks its platform);
// anything else fails with an error wrapping ErrNotRunnable that says what
// the file is and how to submit it (a script with --working-dir, Go
// source with go run).
func CheckSubmittable(path string) error {
	head := readHead(path)
	name := filepath.Base(path)
	switch {
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		return nil
	case bytes.HasPrefix(head, []byte("#!")):
		line, _, _ := bytes.Cut(head[2:], []byte("\n"))
		return fmt.Errorf("%w: %s is a script (#!%s), and troupe submit BINARY runs a compiled program; submit the script with its directory: troupe submit --working-dir %s -- ./%s",
			ErrNotRunnable, name, strings.TrimSpace(string(line)), filepath.Dir(path), name)
	}
	return fmt.Errorf("%w: %s is %s", ErrNotRunnable, name, DescribeFile(name, head))
}
