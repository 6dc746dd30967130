package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"troupe/algorithms/agent"
	"troupe/algorithms/envs"
	"troupe/cmd/internal/cli"
)

// roleFlags collects repeated --role name=file flags.
type roleFlags map[string]string

func (r roleFlags) String() string {
	var parts []string
	for k, v := range r {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (r roleFlags) Set(s string) error {
	name, file, ok := strings.Cut(s, "=")
	if !ok || name == "" || file == "" {
		return fmt.Errorf("want ROLE=DIR, got %q", s)
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("role %q given twice", name)
	}
	r[name] = file
	return nil
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	roles := roleFlags{}
	shared := fs.String("policy", "", "checkpoint directory of one shared policy acting for every role")
	fs.Var(roles, "role", "ROLE=DIR: checkpoint directory of one role's policy (repeat for every role)")
	env := fs.String("env", "planpath", "environment or preset: "+strings.Join(append(envs.Names(), envs.Presets()...), ", "))
	size := fs.Int("size", 0, "grid width and height (planpath, sokoban; 0: the environment's default)")
	width := fs.Int("width", 0, "grid width (overrides --size)")
	height := fs.Int("height", 0, "grid height (overrides --size)")
	rate := fs.Float64("obstacles", 0, "obstacle rate (planpath, sokoban; 0: default, negative: none)")
	budget := fs.Int("turns", 0, "turn budget per episode (0: the environment's default)")
	holes := fs.Int("holes", 0, "sudoku4 empty cells (0: default)")
	steps := fs.Int("steps", 0, "arith operations per problem (0: 2 or 3 at random)")
	single := fs.Bool("single", false, "single-agent mode (only the proposing role acts)")
	episodes := fs.Int("episodes", 100, "number of episodes")
	seed := fs.Int64("seed-start", 1_000_000, "first episode seed (episodes use seeds seed-start .. seed-start+episodes-1; the training scripts hold out 1000000..1000099)")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: 1, the policy's own distribution)")
	greedy := fs.Bool("greedy", false, "decode by argmax (temperature 0), as the AT-GRPO paper evaluates; overrides --temperature")
	sampleSeed := fs.Int64("sample-seed", 7, "sampling seed")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	model := fs.String("model", "", "pretrained Hugging Face model directory the checkpoints were trained from (alone: evaluate the model itself for every role)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: troupe eval (--policy DIR | --role ROLE=DIR ... | --model DIR) [flags]\n\n"+
			"Plays independent episodes (one sampled action per turn, no branching) with trained\n"+
			"checkpoints and prints the success rate and mean team reward.\n\n"+
			"Example:\n  troupe eval --env planpath --size 6 --role tool=runs/planpath-atgrpo/tool \\\n"+
			"      --role planner=runs/planpath-atgrpo/planner\n"+
			"  troupe eval --env planpath --model models/Qwen2.5-0.5B-Instruct --role tool=runs/x/tool --role planner=runs/x/planner\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return cli.ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "troupe eval: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return cli.ErrUsage
	}
	if (*shared != "" && len(roles) > 0) || (*shared == "" && len(roles) == 0 && *model == "") {
		fmt.Fprintln(stderr, "troupe eval: give either --policy DIR or one --role ROLE=DIR per role (or --model DIR alone)")
		fs.Usage()
		return cli.ErrUsage
	}
	if *episodes < 1 {
		return fmt.Errorf("--episodes %d: must be at least 1", *episodes)
	}
	if *temp < 0 {
		return fmt.Errorf("--temperature %v: must not be negative", *temp)
	}
	cfg := envs.Config{Width: *size, Height: *size, ObstacleRate: *rate, TurnBudget: *budget, Holes: *holes, Steps: *steps, Single: *single}
	if *width > 0 {
		cfg.Width = *width
	}
	if *height > 0 {
		cfg.Height = *height
	}
	for _, f := range append([]string{*shared}, roleFiles(roles)...) {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	res, err := agent.EvalCheckpoints(ctx, agent.EvalSpec{
		Env: *env, EnvConfig: cfg, Shared: *shared, Roles: roles, ModelDir: *model,
		Episodes: *episodes, SeedStart: *seed, MaxTurns: *budget, Temperature: float32(*temp), SampleSeed: *sampleSeed, Greedy: *greedy,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%s (%s): %d episodes (seeds %d..%d)\n", res.Env, describe(res.Config), res.Episodes, res.SeedStart, res.SeedStart+int64(res.Episodes)-1)
	fmt.Fprintf(stdout, "success rate  %.1f%%\n", 100*res.SuccessRate)
	fmt.Fprintf(stdout, "mean reward   %.3f (team return per episode)\n", res.MeanReward)
	for _, r := range agent.SortedRoles(res.RoleReward) {
		fmt.Fprintf(stdout, "  %-9s %.3f (team + local)\n", r, res.RoleReward[r])
	}
	fmt.Fprintf(stdout, "mean turns    %.1f, invalid actions %.1f%%\n", res.Turns, 100*res.Invalid)
	return nil
}

func roleFiles(r roleFlags) []string {
	var out []string
	for _, f := range r {
		out = append(out, f)
	}
	return out
}

// describe renders the non-default fields of an environment config.
func describe(c envs.Config) string {
	var parts []string
	if c.Width > 0 || c.Height > 0 {
		parts = append(parts, fmt.Sprintf("%dx%d", c.Width, c.Height))
	}
	if c.ObstacleRate != 0 {
		parts = append(parts, fmt.Sprintf("obstacles %.2f", c.ObstacleRate))
	}
	if c.TurnBudget > 0 {
		parts = append(parts, fmt.Sprintf("%d turns", c.TurnBudget))
	}
	if c.Holes > 0 {
		parts = append(parts, fmt.Sprintf("%d holes", c.Holes))
	}
	if c.Steps > 0 {
		parts = append(parts, fmt.Sprintf("%d steps", c.Steps))
	}
	if c.Single {
		parts = append(parts, "single agent")
	}
	if len(parts) == 0 {
		return "default config"
	}
	return strings.Join(parts, ", ")
}
