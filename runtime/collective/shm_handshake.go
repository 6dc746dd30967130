package collective

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"
)

// After the hello on a Unix socket, the dialling member offers a shared
// segment and the accepting one answers:
//
//	offer  magic "TRSO", version u8, flag u8 (1: a segment's memfd comes
//	       with these bytes, as SCM_RIGHTS; 0: none), 2 zero bytes, ring
//	       bytes u32, 4 zero bytes
//	answer 1 byte: 1 mapped, 0 declined (the stream carries the data)
//
// Both members run the same build, so both speak this exchange on every
// Unix socket connection of a group; TCP connections have none.
const (
	offerMagic = "TRSO"
	offerSize  = 16
)

// isUnix reports whether c is a Unix socket connection (so the peer is on
// this host).
func isUnix(c net.Conn) bool { return c.LocalAddr().Network() == "unix" }

func appendOffer(b []byte, ringBytes int, seg bool) []byte {
	b = append(b, offerMagic...)
	flag := byte(0)
	if seg {
		flag = 1
	}
	b = append(b, shmVersion, flag, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(ringBytes))
	return append(b, 0, 0, 0, 0)
}

// decodeOffer decodes an offer; it returns whether a segment comes with it.
func decodeOffer(b []byte) (seg bool, ringBytes int, err error) {
	if len(b) != offerSize {
		return false, 0, fmt.Errorf("%w: shared memory offer of %d bytes", ErrFrame, len(b))
	}
	if string(b[:4]) != offerMagic {
		return false, 0, fmt.Errorf("%w: not a shared memory offer", ErrFrame)
	}
	if b[4] != shmVersion {
		return false, 0, fmt.Errorf("%w: shared memory offer version %d, this process speaks %d", ErrFrame, b[4], shmVersion)
	}
	if b[5] > 1 || b[6] != 0 || b[7] != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return false, 0, fmt.Errorf("%w: shared memory offer with reserved bits set", ErrFrame)
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if b[5] == 1 && !validShmRingBytes(n) {
		return false, 0, fmt.Errorf("%w: shared memory offer of rings of %d bytes", ErrFrame, n)
	}
	return b[5] == 1, int(n), nil
}

// offerShm runs the dialling side of the exchange on c: it offers a new
// segment when shared memory is on, and returns it if the peer mapped it.
// It returns nil, nil on connections that are not Unix sockets.
func offerShm(c net.Conn) (*shmSegment, error) {
	if !isUnix(c) {
		return nil, nil
	}
	c.SetDeadline(time.Now().Add(helloTimeout))
	defer c.SetDeadline(time.Time{})
	uc, ok := c.(*net.UnixConn)
	var seg *shmSegment
	fd := -1
	if ok && shmEnabled() {
		var err error
		if seg, fd, err = newShmSegment(shmRingBytes); err != nil {
			seg, fd = nil, -1 // the stream carries the data
		}
	}
	var err error
	if seg != nil {
		_, _, err = uc.WriteMsgUnix(appendOffer(nil, seg.ringBytes, true), unixRights(fd), nil)
		closeFD(fd)
	} else {
		_, err = c.Write(appendOffer(nil, 0, false))
	}
	if err != nil {
		seg.release()
		return nil, err
	}
	var ans [1]byte
	if _, err := c.Read(ans[:]); err != nil {
		seg.release()
		return nil, err
	}
	if ans[0] != 1 || seg == nil {
		seg.release()
		if ans[0] > 1 || (ans[0] == 1 && seg == nil) {
			return nil, fmt.Errorf("%w: shared memory answer %d", ErrFrame, ans[0])
		}
		return nil, nil
	}
	return seg, nil
}

// acceptShm runs the accepting side of the exchange on c, and returns the
// segment it mapped, if any. nil, nil on connections that are not Unix
// sockets.
func acceptShm(c net.Conn) (*shmSegment, error) {
	if !isUnix(c) {
		return nil, nil
	}
	c.SetDeadline(time.Now().Add(helloTimeout))
	defer c.SetDeadline(time.Time{})
	var b [offerSize]byte
	var fds []int
	n := 0
	for n < offerSize {
		var k int
		var err error
		if uc, ok := c.(*net.UnixConn); ok {
			oob := make([]byte, 64)
			var oobn int
			k, oobn, _, _, err = uc.ReadMsgUnix(b[n:], oob)
			fds = append(fds, parseRights(oob[:oobn])...)
		} else {
			k, err = c.Read(b[n:])
		}
		n += k
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
	}
	want, _, err := decodeOffer(b[:])
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	var seg *shmSegment
	if want && len(fds) == 1 && shmEnabled() {
		seg, _ = mapShmSegment(fds[0]) // not mapped: the stream carries the data
	}
	closeFDs(fds)
	ans := []byte{0}
	if seg != nil {
		ans[0] = 1
	}
	if _, err := c.Write(ans); err != nil {
		seg.release()
		return nil, err
	}
	return seg, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		closeFD(fd)
	}
}
