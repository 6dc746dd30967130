package driver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"troupe/actors"
	"troupe/internal/testnet"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
	"troupe/scheduler"
)

// techo returns its argument repeated: large results stay with the worker
// and are fetched from its object store.
type techo struct{}

type echoArg struct {
	S      string
	Repeat int
}

func (techo) Echo(ctx context.Context, a echoArg) (string, error) {
	return strings.Repeat(a.S, a.Repeat), nil
}

type techoCfg struct{ Tag string }

func init() {
	actors.MustRegister("TEcho", func(ctx context.Context, c techoCfg) (*techo, error) { return &techo{}, nil })
}

// TestNoSecretsOnLoopback captures every packet on the loopback interface
// (as tcpdump would) while a head and a worker node in this process and a
// driver run actors in worker processes: spawn with a marker in the
// actor's configuration, a call with a marker argument, a result of 512
// KiB fetched from the worker's object store. Over TCP only (no
// same-host Unix sockets). With
// TLS, neither the token nor either marker is in the capture; with
// --insecure they are, which shows the capture sees the traffic.
func TestNoSecretsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, insecure := range []bool{false, true} {
		name := map[bool]string{false: "tls", true: "insecure"}[insecure]
		t.Run(name, func(t *testing.T) {
			tok := "loopback-token-" + name + "-7d2c91e0a4"
			argMarker := "MARKER-arg-" + name + "-31f9c"
			cfgMarker := "MARKER-cfg-" + name + "-b27e0"
			logger := slog.New(slog.NewTextHandler(discard{}, nil))
			pc := testnet.StartCapture(t, "lo")
			head, err := cluster.Start(context.Background(), cluster.Config{NodeID: "head", Role: cluster.RoleHead, DataDir: t.TempDir(),
				BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), RaftPort: freeTCPPort(t), Token: tok,
				Timing: cluster.FastTiming(), Logger: logger, TLS: security.TLS{Insecure: insecure},
				Resources: scheduler.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30}})
			if err != nil {
				t.Fatal(err)
			}
			defer head.Shutdown()
			w, err := cluster.Start(context.Background(), cluster.Config{NodeID: "w1", Role: cluster.RoleWorker, DataDir: t.TempDir(),
				BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), Token: tok, Join: []string{head.Addr()},
				Timing: cluster.FastTiming(), Logger: logger, TLS: security.TLS{Insecure: insecure},
				Resources: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 1 << 30, Custom: scheduler.CustomResources{"special": 1}}})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Shutdown()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rt, err := Connect(ctx, Config{Address: head.Addr(), Token: tok, TLS: security.TLS{Insecure: insecure}, NoWireUnix: true, NoObjectsUnix: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Shutdown(context.Background())
			waitNodes(t, rt, 2)
			h, err := actors.Spawn[techo](ctx, rt, "TEcho", techoCfg{Tag: cfgMarker}, actors.Resources(map[string]float64{"special": 1}))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := actors.Call(ctx, h, (*techo).Echo, echoArg{S: argMarker, Repeat: 1}).Get(ctx); err != nil || got != argMarker {
				t.Fatalf("Echo = %q, %v", got, err)
			}
			big := echoArg{S: argMarker, Repeat: (512 << 10) / len(argMarker)}
			if got, err := actors.Call(ctx, h, (*techo).Echo, big).Get(ctx); err != nil || len(got) != big.Repeat*len(argMarker) {
				t.Fatalf("large Echo: %d bytes, %v", len(got), err)
			}
			rt.Shutdown(context.Background())
			w.Shutdown()
			head.Shutdown()
			pc.Stop()
			b := pc.Bytes()
			if len(b) < 100<<10 {
				t.Fatalf("captured only %d bytes", len(b))
			}
			for _, s := range []struct {
				what  string
				found bool
			}{
				{"token", bytes.Contains(b, []byte(tok)) || bytes.Contains(b, hpack.AppendHuffmanString(nil, "Bearer "+tok))},
				{"argument marker", bytes.Contains(b, []byte(argMarker))},
				{"configuration marker", bytes.Contains(b, []byte(cfgMarker))},
			} {
				if s.found != insecure {
					t.Errorf("%s in %d captured bytes: %v, want %v", s.what, len(b), s.found, insecure)
				}
			}
		})
	}
}
