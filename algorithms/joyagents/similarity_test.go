package joyagents

import (
	"math/rand/v2"
	"testing"
)

// similarityRef is the definition of Similarity with string sets: the
// Jaccard index of the NUL-padded strings' trigram sets.
func similarityRef(a, b string) float64 {
	if a == b {
		return 1
	}
	grams := func(s string) map[string]bool {
		p := "\x00" + s + "\x00"
		out := map[string]bool{}
		for i := 0; i+3 <= len(p); i++ {
			out[p[i:i+3]] = true
		}
		if len(p) < 3 {
			out[p] = true
		}
		return out
	}
	ga, gb := grams(a), grams(b)
	inter := 0
	for g := range ga {
		if gb[g] {
			inter++
		}
	}
	return float64(inter) / float64(len(ga)+len(gb)-inter)
}

// TestSimilarityMatchesDefinition: the sorted-code implementation gives
// exactly the string-set definition's value on seeded random texts over a
// small alphabet (so trigrams repeat and collide), NULs and empties.
func TestSimilarityMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "ab\x00."[r.IntN(4)]
		}
		return string(b)
	}
	for i := 0; i < 5000; i++ {
		a, b := text(), text()
		if got, want := Similarity(a, b), similarityRef(a, b); got != want {
			t.Fatalf("Similarity(%q, %q) = %v, definition %v", a, b, got, want)
		}
	}
}

// FuzzSimilarity checks the implementation against the definition.
func FuzzSimilarity(f *testing.F) {
	f.Add("planner: a14 g52", "planner: a15 g52")
	f.Add("", "\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := Similarity(a, b), similarityRef(a, b); got != want {
			t.Fatalf("Similarity(%q, %q) = %v, definition %v", a, b, got, want)
		}
	})
}

// BenchmarkSimilarityRef is BenchmarkSimilarity with the string-set
// definition (the implementation before the sorted trigram codes).
func BenchmarkSimilarityRef(b *testing.B) {
	x := "planner: grid 5x5 start (0,0) goal (4,3) walls (1,1) (2,3) turn 2"
	y := "planner: grid 5x5 start (0,1) goal (4,3) walls (1,1) (2,2) turn 3"
	for b.Loop() {
		similarityRef(x, y)
	}
}
