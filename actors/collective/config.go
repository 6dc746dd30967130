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
	// scripts/allreduce-bench -algo direct|ring -min 4KiB -max 4MiB over
	// Unix sockets on a quiet 2-core machine (docs/performance.md): with
	// 4 members direct was faster up to 64 KiB (362 µs against 499) and
	// slower from 128 KiB (592 against 555); with 2 members the two cross
	// between 256 and 512 KiB, and the ring costs up to 20% at 128 KiB.
	// The 4-member crossing is taken: the direct exchange's cost grows
	// with the group (n-1 whole buffers per member).
	DefaultDirectMaxBytes = 64 << 10
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
