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
	// direct exchange should give way to the ring. It is provisional until
	// measured on a quiet machine with scripts/allreduce-bench -algo
	// direct|ring (docs/performance.md says how): on the loaded machine it
	// was built on, the ring lost at every size up to 512 KiB.
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
