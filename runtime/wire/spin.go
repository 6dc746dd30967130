package wire

import (
	"time"

	"troupe/runtime/transport"
)

// Reads poll the socket briefly before they park; the polling reader lives
// in runtime/transport (transport.NewSpinReader), which TLS connections
// share, and the longest poll is the Security's (transport.Security.Spin)
// that a Client is dialled or a Server made with. These forwards keep the
// setting's names where this package's users find them.

// SpinEnv sets the longest poll before parking (transport.SpinEnv).
const SpinEnv = transport.SpinEnv

// DefaultSpin is the longest poll of a Security whose Spin is 0
// (transport.DefaultSpin).
const DefaultSpin = transport.DefaultSpin

// ParseSpin parses a SpinEnv value into a transport.Security.Spin (see
// transport.ParseSpin). An error names the variable.
func ParseSpin(v string) (time.Duration, error) { return transport.ParseSpin(v) }
