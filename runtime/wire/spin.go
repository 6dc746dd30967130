package wire

import (
	"time"

	"troupe/runtime/transport"
)

// Reads poll the socket briefly before they park; the polling reader and
// its setting live in runtime/transport (transport.NewSpinReader), which
// TLS connections share. These forwards keep the setting where the
// process's edge (runtime.Init) and this package's tests find it.

// SpinEnv sets the longest poll before parking (transport.SpinEnv).
const SpinEnv = transport.SpinEnv

// DefaultSpin is the longest poll without SetSpin (transport.DefaultSpin).
const DefaultSpin = transport.DefaultSpin

// SetSpin sets the longest poll of connections opened from now on, plain
// and TLS (0 disables polling).
func SetSpin(d time.Duration) { transport.SetSpin(d) }

// ParseSpin parses a SpinEnv value; empty means DefaultSpin. An error
// names the variable.
func ParseSpin(v string) (time.Duration, error) { return transport.ParseSpin(v) }
