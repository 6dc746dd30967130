package collective

import "fmt"

// Config holds the algorithms' settings; zero fields take the defaults.
type Config struct {
	// ChunkBytes is the size of the messages the ring and the chain
	// broadcast split buffers into, so that sending one chunk overlaps
	// receiving and reducing the next.
	ChunkBytes int
	// DirectMaxBytes: calls on buffers up to this size exchange them
	// directly between every pair of members (one round, n-1 messages
	// each) instead of going round the ring (2(n-1) rounds). The default
	// is DefaultDirectMaxBytes.
	DirectMaxBytes int
}

const (
	// DefaultChunkBytes is Config.ChunkBytes' default.
	DefaultChunkBytes = 512 << 10
	// DefaultDirectMaxBytes is Config.DirectMaxBytes' default: where the
	// direct exchange gives way to the ring. Measured with
	// scripts/allreduce-bench -algo direct|ring on a quiet 2-core machine
	// (docs/performance.md). Through shared memory, the path of members on
	// one host, direct is faster up to 128 KiB with 2 and with 4 members
	// (94 µs against 107 and 341 against 407 at 128 KiB) and the ring from
	// 256 KiB. Over sockets (members on other hosts) 4 members cross
	// between 64 and 128 KiB, where the ring is 7% faster at 128 KiB. The
	// shared-memory crossing is taken: it gains 12-16% at 128 KiB where the
	// socket path loses 7%.
	DefaultDirectMaxBytes = 128 << 10
)

func (c Config) withDefaults() Config {
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.DirectMaxBytes == 0 {
		c.DirectMaxBytes = DefaultDirectMaxBytes
	}
	return c
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	if c.ChunkBytes < 0 || (c.ChunkBytes > 0 && c.ChunkBytes < 64) {
		return fmt.Errorf("%w: ChunkBytes %d (want 0 for the default, or at least 64)", ErrBadArg, c.ChunkBytes)
	}
	if c.DirectMaxBytes < 0 {
		return fmt.Errorf("%w: DirectMaxBytes %d < 0 (0 takes the default)", ErrBadArg, c.DirectMaxBytes)
	}
	return nil
}
