package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"troupe/algorithms/agent"
	"troupe/algorithms/policy"
)

func tinyCheckpoint(t *testing.T, dir, name string, ctxLen int) string {
	t.Helper()
	ctx := context.Background()
	p, err := agent.NewPolicy(ctx, agent.Config{Name: name, Model: policy.Config{Layers: 1, Heads: 2, Width: 16, Context: ctxLen}, Seed: 1, MaxNewTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	path, err := p.Save(ctx, agent.SaveRequest{Path: filepath.Join(dir, name)})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEvalCommand(t *testing.T) {
	dir := t.TempDir()
	tool := tinyCheckpoint(t, dir, "tool", 64)
	planner := tinyCheckpoint(t, dir, "planner", 64)
	ctx := context.Background()
	var out, errb bytes.Buffer
	err := runEval(ctx, []string{"--env", "planpath", "--size", "5", "--episodes", "3", "--role", "tool=" + tool, "--role", "planner=" + planner}, &out, &errb)
	if err != nil {
		t.Fatalf("%v; stderr %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "success rate") || !strings.Contains(out.String(), "seeds 1000000..1000002") {
		t.Fatalf("output %q", out.String())
	}
	out.Reset()
	if err := runEval(ctx, []string{"--size", "5", "--episodes", "2", "--policy", tool, "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var res agent.EvalResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Episodes != 2 || res.Policies["shared"] != tool {
		t.Fatalf("json %q: %+v %v", out.String(), res, err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no policy":       {[]string{"--size", "5"}, "usage error"},
		"both":            {[]string{"--policy", tool, "--role", "tool=" + tool}, "usage error"},
		"missing file":    {[]string{"--policy", filepath.Join(dir, "nope")}, "no such file"},
		"not checkpoint":  {[]string{"--policy", dir}, "bad checkpoint"},
		"missing role":    {[]string{"--size", "5", "--role", "tool=" + tool}, `no checkpoint for role "planner"`},
		"unknown role":    {[]string{"--size", "5", "--role", "tool=" + tool, "--role", "planner=" + planner, "--role", "pilot=" + tool}, `no role "pilot"`},
		"bad role flag":   {[]string{"--role", "tool"}, "usage error"},
		"grid too big":    {[]string{"--size", "8", "--policy", tool}, "context 64"},
		"unknown env":     {[]string{"--env", "chess", "--policy", tool}, "unknown environment"},
		"bad size":        {[]string{"--size", "30", "--policy", tool}, "outside 5..10"},
		"episodes":        {[]string{"--episodes", "0", "--policy", tool}, "at least 1"},
		"extra arguments": {[]string{"--policy", tool, "what"}, "usage error"},
	} {
		errb.Reset()
		err := runEval(ctx, tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
