package envs

import "strings"

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
