package agent

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"troupe/algorithms/policy"
)

// TestPolicySource: the policy derives one model source from its config
// and resolves it before anything else; a trained adapter given as the
// checkpoint brings its settings, and bad checkpoints fail typed.
func TestPolicySource(t *testing.T) {
	ctx := context.Background()
	p := newTiny(t, loraConfig())
	dir := filepath.Join(t.TempDir(), "shared")
	if _, err := p.Save(ctx, SaveRequest{Path: dir}); err != nil {
		t.Fatal(err)
	}
	want, _ := p.Model().(*policy.Llama).Adapter("shared").Weights()

	// an adapter checkpoint without LoRA settings (as troupe eval builds
	// its policies) becomes a LoRA policy of the adapter's settings
	q := tinyConfig()
	q.KVHeads, q.Checkpoint = 1, dir
	r := newTiny(t, q)
	ad := r.Model().(*policy.Llama).Adapter("shared")
	if ad == nil {
		t.Fatal("no adapter from the checkpoint")
	}
	if got, _ := ad.Weights(); !slices.Equal(got, want) || !ad.Config().Matches(loraConfig().LoRA) {
		t.Fatalf("adapter %+v, weights equal %v", ad.Config(), slices.Equal(got, want))
	}

	for _, tc := range []struct {
		name string
		mut  func(*Config)
		is   []error
	}{
		{"adapter without a base", func(c *Config) { c.Checkpoint, c.Model = dir, policy.Config{} },
			[]error{ErrCheckpoint, policy.ErrNoBase, ErrConfig}},
		{"neither a model nor an adapter", func(c *Config) { c.Checkpoint = t.TempDir() },
			[]error{ErrCheckpoint, policy.ErrSource, fs.ErrNotExist}},
		{"adapter of another rank", func(c *Config) { c.Checkpoint, c.KVHeads, c.LoRA = dir, 1, policy.LoRAConfig{Rank: 2, Alpha: 4} },
			[]error{ErrCheckpoint}},
		{"adapter for two adapters", func(c *Config) {
			c.Checkpoint, c.KVHeads, c.LoRA, c.Adapters = dir, 1, loraConfig().LoRA, []string{"a", "b"}
		}, []error{ErrConfig}},
		{"bad backend", func(c *Config) { c.Backend = "no-such-backend" }, []error{ErrConfig}},
		// the checkpoint is read before a backend is chosen
		{"before the backend", func(c *Config) { c.Checkpoint, c.Backend = t.TempDir(), "no-such-backend" },
			[]error{ErrCheckpoint, policy.ErrSource}},
	} {
		c := tinyConfig()
		tc.mut(&c)
		_, err := NewPolicy(ctx, c)
		for _, e := range tc.is {
			if !errors.Is(err, e) {
				t.Errorf("%s: %v is not %v", tc.name, err, e)
			}
		}
	}
}
