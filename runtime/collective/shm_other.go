//go:build !linux

package collective

import (
	"errors"
	"sync/atomic"
	"time"
)

const shmSupported = false

var errNoShm = errors.New("collective shared memory: not on this system")

func newShmSegment(int) (*shmSegment, int, error)     { return nil, -1, errNoShm }
func mapShmSegment(int) (*shmSegment, error)          { return nil, errNoShm }
func (s *shmSegment) release()                        {}
func closeFD(int)                                     {}
func futexWait(*atomic.Uint32, uint32, time.Duration) {}
func futexWake(*atomic.Uint32)                        {}

func unixRights(int) []byte    { return nil }
func parseRights([]byte) []int { return nil }
