package objstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// preface begins every transfer connection. A client on a TLS
// connection sends prefaceSealed instead: the objects it fetches come in
// sealed bulk frames (transport.Bulk), not in TLS records.
const (
	preface       = "TOBJ\x01"
	prefaceSealed = "TOBJ\x02"
)

// Request operations.
const (
	opFetch   byte = 1
	opRelease byte = 2
)

// Response statuses.
const (
	statusOK      byte = 0
	statusFreed   byte = 1
	statusUnknown byte = 2
	statusBad     byte = 3 // malformed request
)

// maxReleaseBatch bounds the references one release request carries.
const maxReleaseBatch = 1024

// maxMessage bounds an error message in a response.
const maxMessage = 4096

// ErrProtocol: a transfer message could not be decoded.
var ErrProtocol = errors.New("object transfer: malformed message")

// item names one object in a request.
type item struct {
	id  ID
	key Key
}

// request is one decoded request: a fetch has one item.
type request struct {
	op    byte
	items []item
}

// appendRequest appends a request's encoding to b.
func appendRequest(b []byte, op byte, items []item) []byte {
	b = append(b, op)
	if op == opRelease {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(items)))
	}
	for _, it := range items {
		b = append(b, it.id[:]...)
		b = append(b, it.key[:]...)
	}
	return b
}

// readRequest reads one request. io.EOF means the peer closed cleanly
// between requests; anything malformed wraps ErrProtocol.
func readRequest(r io.Reader) (request, error) {
	var req request
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return req, err
	}
	req.op = hdr[0]
	n := 1
	switch req.op {
	case opFetch:
	case opRelease:
		if _, err := io.ReadFull(r, hdr[1:3]); err != nil {
			return req, fmt.Errorf("%w: release count: %v", ErrProtocol, err)
		}
		n = int(binary.LittleEndian.Uint16(hdr[1:3]))
		if n == 0 || n > maxReleaseBatch {
			return req, fmt.Errorf("%w: release of %d references (1..%d)", ErrProtocol, n, maxReleaseBatch)
		}
	default:
		return req, fmt.Errorf("%w: unknown operation %d", ErrProtocol, req.op)
	}
	buf := make([]byte, 32*n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return req, fmt.Errorf("%w: operation %d: %d references: %v", ErrProtocol, req.op, n, err)
	}
	req.items = make([]item, n)
	for i := range req.items {
		copy(req.items[i].id[:], buf[32*i:])
		copy(req.items[i].key[:], buf[32*i+16:])
	}
	return req, nil
}

// appendResponse appends a response header: the size for statusOK, the
// message otherwise.
func appendResponse(b []byte, status byte, size uint64, msg string) []byte {
	b = append(b, status)
	if status == statusOK {
		return binary.LittleEndian.AppendUint64(b, size)
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// response is a decoded response header.
type response struct {
	status byte
	size   uint64 // statusOK
	msg    string // otherwise
}

// readResponse reads a response header; malformed input wraps ErrProtocol.
func readResponse(r io.Reader) (response, error) {
	var resp response
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return resp, err
	}
	resp.status = hdr[0]
	switch resp.status {
	case statusOK:
		if _, err := io.ReadFull(r, hdr[:8]); err != nil {
			return resp, fmt.Errorf("%w: size: %v", ErrProtocol, err)
		}
		resp.size = binary.LittleEndian.Uint64(hdr[:8])
		if resp.size > MaxObjectSize {
			return resp, fmt.Errorf("%w: size %d over the %d limit", ErrProtocol, resp.size, uint64(MaxObjectSize))
		}
	case statusFreed, statusUnknown, statusBad:
		if _, err := io.ReadFull(r, hdr[:2]); err != nil {
			return resp, fmt.Errorf("%w: message length: %v", ErrProtocol, err)
		}
		n := int(binary.LittleEndian.Uint16(hdr[:2]))
		if n > maxMessage {
			return resp, fmt.Errorf("%w: message of %d bytes", ErrProtocol, n)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(r, msg); err != nil {
			return resp, fmt.Errorf("%w: message: %v", ErrProtocol, err)
		}
		resp.msg = string(msg)
	default:
		return resp, fmt.Errorf("%w: unknown status %d", ErrProtocol, resp.status)
	}
	return resp, nil
}

// statusOf maps a store error to a response status.
func statusOf(err error) byte {
	switch {
	case errors.Is(err, ErrFreed):
		return statusFreed
	case errors.Is(err, ErrUnknown):
		return statusUnknown
	}
	return statusBad
}

// errOf turns an error response about ref back into an error.
func errOf(ref Ref, resp response) error {
	switch resp.status {
	case statusFreed:
		return fmt.Errorf("object %s at %s: %w", ref.ID, ref.Owner, ErrFreed)
	case statusUnknown:
		return fmt.Errorf("object %s at %s: %w", ref.ID, ref.Owner, ErrUnknown)
	}
	return fmt.Errorf("object %s at %s: %w: the owner refused the request: %s", ref.ID, ref.Owner, ErrProtocol, resp.msg)
}
