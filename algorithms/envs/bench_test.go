package envs

import "testing"

// BenchmarkNew measures episode generation per environment.
func BenchmarkNew(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := New(name, Config{}, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExpertEpisode measures a full expert episode (generation, observe,
// expert action and step for every role) per environment.
func BenchmarkExpertEpisode(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				e, err := New(name, Config{}, int64(i))
				if err != nil {
					b.Fatal(err)
				}
				ex := e.(Expert)
				for !e.Done() {
					for _, r := range e.Roles() {
						_ = e.Observe(r)
						e.Step(r, ex.ExpertAction(r))
					}
				}
			}
		})
	}
}

// BenchmarkClone measures Clone, which tree sampling calls per candidate.
func BenchmarkClone(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			e, _ := New(name, Config{}, 1)
			for b.Loop() {
				_ = e.Clone()
			}
		})
	}
}
