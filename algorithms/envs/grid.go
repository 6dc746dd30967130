package envs

import (
	"fmt"
	"math"
	"strings"
)

// dirLetters are the move letters in the fixed order experts break ties in.
const dirLetters = "UDLR"

var (
	dirDR = [4]int{-1, 1, 0, 0}
	dirDC = [4]int{0, 0, -1, 1}
)

// parseMoves reads an action of 1..max move letters (U, D, L, R; case and
// surrounding white space ignored). ok is false for anything else.
func parseMoves(action string, max int) (dirs []int, ok bool) {
	s := strings.TrimSpace(action)
	if len(s) == 0 || len(s) > max {
		return nil, false
	}
	dirs = make([]int, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		d := strings.IndexByte(dirLetters, c)
		if d < 0 {
			return nil, false
		}
		dirs = append(dirs, d)
	}
	return dirs, true
}

// movesString is the canonical text of a move list.
func movesString(dirs []int) string {
	b := make([]byte, len(dirs))
	for i, d := range dirs {
		b[i] = dirLetters[d]
	}
	return string(b)
}

// neighbor returns the cell one step from cell in direction d on a w×h
// grid, or -1 off the grid.
func neighbor(w, h, cell, d int) int {
	r, c := cell/w+dirDR[d], cell%w+dirDC[d]
	if r < 0 || r >= h || c < 0 || c >= w {
		return -1
	}
	return r*w + c
}

// manhattan distance between two cells of a grid of width w.
func manhattan(w, a, b int) int {
	return absInt(a/w-b/w) + absInt(a%w-b%w)
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// bfsDist returns the step distance from every cell to target over cells
// that are not blocked (-1 where unreachable).
func bfsDist(w, h int, blocked []bool, target int) []int {
	dist := make([]int, w*h)
	for i := range dist {
		dist[i] = -1
	}
	dist[target] = 0
	queue := []int{target}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for d := 0; d < 4; d++ {
			n := neighbor(w, h, cur, d)
			if n < 0 || blocked[n] || dist[n] >= 0 {
				continue
			}
			dist[n] = dist[cur] + 1
			queue = append(queue, n)
		}
	}
	return dist
}

// digit is the single character for a small non-negative number (0..9).
func digit(x int) byte { return byte('0' + x) }

// gridCfg is the validated configuration of a grid environment.
type gridCfg struct {
	w, h   int
	rate   float64 // share of blocked cells
	budget int     // turn budget; 0: the environment's default
	moves  int     // moves per action
}

// gridConfig validates cfg for the grid environment env and fills the
// defaults shared by the grid environments: 6×6, defaultRate blocked cells
// (what names them in errors), one move per action; sizes 5..maxSize.
func gridConfig(env, what string, cfg Config, defaultRate float64, maxSize int) (gridCfg, error) {
	c := gridCfg{w: cfg.Width, h: cfg.Height, rate: cfg.ObstacleRate, budget: cfg.TurnBudget, moves: cfg.Moves}
	if c.w == 0 {
		c.w = 6
	}
	if c.h == 0 {
		c.h = 6
	}
	if c.rate == 0 {
		c.rate = defaultRate
	}
	if c.rate < 0 {
		c.rate = 0
	}
	if c.moves == 0 {
		c.moves = 1
	}
	switch {
	case c.w < 5 || c.w > maxSize || c.h < 5 || c.h > maxSize:
		return c, fmt.Errorf("%w: %s size %dx%d outside 5..%d", ErrBadConfig, env, c.w, c.h, maxSize)
	case c.rate > 0.6 || math.IsNaN(c.rate):
		return c, fmt.Errorf("%w: %s %s rate %.2f > 0.6", ErrBadConfig, env, what, c.rate)
	case c.moves < 1 || c.moves > 4:
		return c, fmt.Errorf("%w: %s moves per action %d outside 1..4", ErrBadConfig, env, c.moves)
	}
	return c, nil
}
