package cpu

// Zero is lazy on the fast backend: it records the cleared range on the
// buffer's root allocation instead of writing it. An op whose output would
// accumulate into a range that is still pending overwrites it instead (a
// backward matmul then writes with beta 0 and never reads the old values),
// which consumes the range; any other access clears the part of the pending
// ranges it touches first (materialize), and Data clears them all, so every
// result is what an eager Zero would give. This saves a write pass over the
// backward scratch and the gradients every step, and the read that
// accumulating into zeros costs.

// span is the range [lo, hi) of a root's elements.
type span struct{ lo, hi int }

// addPending records [lo, hi) as zeroed but not written, merging it with
// overlapping or adjacent pending ranges so the list stays disjoint.
func (r *Buf) addPending(lo, hi int) {
	if lo >= hi {
		return
	}
	out := r.pend[:0]
	for _, s := range r.pend {
		if s.hi < lo || s.lo > hi {
			out = append(out, s)
			continue
		}
		lo, hi = min(lo, s.lo), max(hi, s.hi)
	}
	r.pend = append(out, span{lo, hi})
}

// consume reports whether [lo, hi) lies wholly in one pending range (the
// ranges are disjoint and merged, so that is the same as being covered), and
// if so removes it from the pending ranges: the caller will overwrite it.
func (r *Buf) consume(lo, hi int) bool {
	if lo >= hi {
		return true
	}
	for i, s := range r.pend {
		if s.lo <= lo && hi <= s.hi {
			r.pend = append(r.pend[:i], r.pend[i+1:]...)
			if s.lo < lo {
				r.pend = append(r.pend, span{s.lo, lo})
			}
			if hi < s.hi {
				r.pend = append(r.pend, span{hi, s.hi})
			}
			return true
		}
	}
	return false
}

// materialize clears the pending parts of [lo, hi) of root r; pending parts
// outside it stay pending.
func (b *Backend) materialize(r *Buf, lo, hi int) {
	n := len(r.pend)
	for i := 0; i < n; {
		s := r.pend[i]
		if s.hi <= lo || s.lo >= hi {
			i++
			continue
		}
		a, c := max(s.lo, lo), min(s.hi, hi)
		b.zero(r.d[a:c])
		// drop s, keep what lies outside [lo, hi)
		r.pend[i] = r.pend[n-1]
		r.pend = append(r.pend[:n-1], r.pend[n:]...)
		n--
		if s.lo < a {
			r.pend = append(r.pend, span{s.lo, a})
		}
		if c < s.hi {
			r.pend = append(r.pend, span{c, s.hi})
		}
	}
}
