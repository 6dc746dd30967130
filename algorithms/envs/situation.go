package envs

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSituation reports an observation an abstraction cannot read.
var ErrSituation = errors.New("envs: observation not understood")

// Situation abstracts role's observation obs of environment env into what
// recurs across instances, so that a memory keyed on it (JoyAgents-R1's)
// can answer on fresh grids: see PlanPathSituation. HasSituation reports
// which environments have one.
func Situation(env, role, obs string) (string, error) {
	switch env {
	case "planpath":
		return PlanPathSituation(obs)
	}
	return "", fmt.Errorf("%w: %s has no situation abstraction", ErrSituation, env)
}

// HasSituation reports whether Situation abstracts env's observations.
func HasSituation(env string) bool { return env == "planpath" }

// PlanPathSituation abstracts a Plan-Path observation to the agent's local
// neighbourhood (the 3×3 cells around it, '-' off the grid, 'G' the goal),
// the direction to the goal (the signs of the row and column offsets:
// U/D/0, L/R/0) and what the other agent last said (the tool sees the
// planner's last action, the planner the tool's suggestion and its own
// refused move), prefixed by the role's letter:
//
//	"p .#./.A./... d:DR m:- t:D"
//
// Two grids with the same neighbourhood, goal direction and messages give
// the same situation, which a raw observation never does.
func PlanPathSituation(obs string) (string, error) {
	f := strings.Fields(obs)
	if len(f) < 6 || len(f[0]) != 1 || len(f[1]) != 3 || len(f[2]) != 3 || f[1][0] != 'a' || f[2][0] != 'g' {
		return "", fmt.Errorf("%w: %q is not a planpath observation", ErrSituation, obs)
	}
	rows := strings.Split(f[len(f)-1], "/")
	ar, ac := int(f[1][1]-'0'), int(f[1][2]-'0')
	gr, gc := int(f[2][1]-'0'), int(f[2][2]-'0')
	if ar < 0 || ar >= len(rows) || ac < 0 || ac >= len(rows[ar]) || rows[ar][ac] != 'A' {
		return "", fmt.Errorf("%w: %q: no agent at %s", ErrSituation, obs, f[1])
	}
	var b strings.Builder
	b.WriteString(f[0])
	b.WriteByte(' ')
	for r := ar - 1; r <= ar+1; r++ {
		if r > ar-1 {
			b.WriteByte('/')
		}
		for c := ac - 1; c <= ac+1; c++ {
			if r < 0 || r >= len(rows) || c < 0 || c >= len(rows[r]) {
				b.WriteByte('-')
			} else {
				b.WriteByte(rows[r][c])
			}
		}
	}
	b.WriteString(" d:")
	b.WriteByte(sign(gr-ar, 'U', 'D'))
	b.WriteByte(sign(gc-ac, 'L', 'R'))
	for _, x := range f[4 : len(f)-1] { // p: (tool) or m: and t: (planner)
		b.WriteByte(' ')
		b.WriteString(x)
	}
	return b.String(), nil
}

// sign is neg, pos or '0' by the sign of d.
func sign(d int, neg, pos byte) byte {
	switch {
	case d < 0:
		return neg
	case d > 0:
		return pos
	}
	return '0'
}
