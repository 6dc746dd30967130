package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"troupe/runtime/api"
)

// ErrWrongPlatform: an uploaded binary is not an executable for the node's
// OS/architecture.
var ErrWrongPlatform = api.ErrWrongPlatform

// BinaryChunk is the upload chunk size (well under the gRPC message limit).
const BinaryChunk = 1 << 20

// HasBinaryRequest asks whether a node stores a binary (or, with Kind
// "package", a working-directory archive).
type HasBinaryRequest struct {
	Hash string `msgpack:"hash"`
	Kind string `msgpack:"kind,omitempty"`
}

// HasBinaryResponse answers HasBinaryRequest.
type HasBinaryResponse struct {
	Present bool `msgpack:"present"`
}

// PutBinaryRequest appends one chunk of a binary at Offset; Final checks and
// stores it.
type PutBinaryRequest struct {
	Hash   string `msgpack:"hash"`
	Kind   string `msgpack:"kind,omitempty"` // "" (a binary) or "package"
	Offset int64  `msgpack:"off"`
	Data   []byte `msgpack:"data,omitempty"`
	Final  bool   `msgpack:"final,omitempty"`
}

// PutBinaryResponse is the upload's size so far.
type PutBinaryResponse struct {
	Size int64 `msgpack:"size"`
}

// HashFile returns the hex sha256 of a file.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// UploadBinary stores the file at path (whose sha256 is hash) on the node
// at the client's first address, unless it has it already. It reports
// whether bytes were sent.
func (c *Client) UploadBinary(ctx context.Context, path, hash string) (sent bool, err error) {
	return c.Upload(ctx, "", path, hash)
}

// Upload stores a file of kind on the node at the client's first address.
func (c *Client) Upload(ctx context.Context, kind, path, hash string) (sent bool, err error) {
	has := new(HasBinaryResponse)
	if err := c.invoke(ctx, "HasBinary", &HasBinaryRequest{Hash: hash, Kind: kind}, has); err != nil {
		return false, fmt.Errorf("upload binary: %w", err)
	}
	if has.Present {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("upload binary: %w", err)
	}
	defer f.Close()
	buf := make([]byte, BinaryChunk)
	var off int64
	for {
		k, rerr := io.ReadFull(f, buf)
		final := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !final {
			return true, fmt.Errorf("upload binary: read %s: %w", path, rerr)
		}
		resp := new(PutBinaryResponse)
		if err := c.invoke(ctx, "PutBinary", &PutBinaryRequest{Hash: hash, Kind: kind, Offset: off, Data: buf[:k], Final: final}, resp); err != nil {
			return true, fmt.Errorf("upload binary %s: %w", filepath.Base(path), err)
		}
		off += int64(k)
		if final {
			return true, nil
		}
	}
}
