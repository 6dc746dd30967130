package collective

import (
	"fmt"
	"time"

	"troupe/runtime/transport"
)

// UnixEnv is the environment variable that, set to "0", makes a worker's
// groups connect over TCP to members on its host too (worker.Options'
// NoCollectiveUnix): for measuring the path between hosts on one.
const UnixEnv = "TROUPE_COLLECTIVE_UNIX"

// Config is a Transport's settings; zero fields take the defaults.
type Config struct {
	// Security authenticates (and on TCP encrypts) the connections, as
	// every cluster connection.
	Security transport.Security
	// Host is the address the listener binds ("127.0.0.1" by default; a
	// worker of a multi-host cluster listens on its node's address).
	Host string
	// NoUnix makes members on one host connect over TCP (with TLS when
	// Security has it) instead of Unix sockets, as members on two hosts do.
	NoUnix bool
	// Heartbeat is how often an otherwise idle connection carries a
	// heartbeat.
	Heartbeat time.Duration
	// Timeout is how long a connection may stay silent before its peer is
	// lost: it bounds how long a member cut off from the others (or hung)
	// keeps their calls waiting. A member that dies closes its connections,
	// and is lost at once.
	Timeout time.Duration
	// ConnectTimeout bounds forming a group's connections (on top of the
	// context).
	ConnectTimeout time.Duration
	// QueueFrames is how many frames a connection's reader reads ahead.
	QueueFrames int
	// MaxPayload bounds a data frame's payload.
	MaxPayload int
	// SocketBuffer is the kernel send and receive buffer asked for on
	// each connection (the kernel caps it at net.core.wmem_max/rmem_max).
	SocketBuffer int
}

// Defaults.
const (
	DefaultHeartbeat      = time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultConnectTimeout = 30 * time.Second
	DefaultQueueFrames    = 8
	DefaultMaxPayload     = 1 << 30
	DefaultSocketBuffer   = 4 << 20
)

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.QueueFrames == 0 {
		c.QueueFrames = DefaultQueueFrames
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Heartbeat < 0 || c.Timeout < 0 || c.ConnectTimeout < 0:
		return fmt.Errorf("collective transport: negative duration")
	case c.Timeout < 2*c.Heartbeat:
		return fmt.Errorf("collective transport: Timeout %v under two heartbeats (%v)", c.Timeout, c.Heartbeat)
	case c.QueueFrames < 1:
		return fmt.Errorf("collective transport: QueueFrames %d < 1", c.QueueFrames)
	case c.MaxPayload < 1:
		return fmt.Errorf("collective transport: MaxPayload %d < 1", c.MaxPayload)
	}
	return nil
}
