package joyagents

import (
	"math"
	"slices"
	"sort"
	"sync"

	"troupe/algorithms/grpo"
)

// Entry is one remembered (situation, answer) pair.
type Entry struct {
	Situation string  // the raw observation the answer was given to
	Answer    string  // the action text
	Reward    float64 // the memory reward (accuracy + format) it earned
	Diff      float64 // Reward − its group's mean memory reward at insertion
	Time      int64   // training step it was inserted at
}

// Threshold selects the rule that decides which group answers enter and
// leave the memory.
type Threshold int

const (
	// ThresholdPooled (the default) compares each answer with the
	// distribution of its agent's memory rewards over the groups of one
	// evolution (a node position's, or with PerStep the step's): an
	// answer at or above that distribution's (1−Tail) quantile that beats
	// its own group's mean is inserted; one at or below the Tail quantile
	// that falls short of its group's mean removes similar entries.
	ThresholdPooled Threshold = iota
	// ThresholdGroupZ is the paper's rule inside each group: above
	// μ + z·σ inserted, below μ − z·σ removed. With the unbiased std no
	// sample of a group of G lies more than (G−1)/√G stds from the mean, so
	// z = 1.96 can fire only from G = 6 on, and then only for a lone
	// outlier (at G = 6 the largest z is 2.04).
	ThresholdGroupZ
)

// String names the rule.
func (t Threshold) String() string {
	switch t {
	case ThresholdPooled:
		return "pooled"
	case ThresholdGroupZ:
		return "group-z"
	}
	return "unknown"
}

// MemoryConfig configures memory evolution (the paper's adaptive memory
// evolution) and how agents read the memory when they act.
type MemoryConfig struct {
	Capacity     int       // entries per agent; the lowest-scoring entry is evicted
	Threshold    Threshold // insert/remove rule
	Tail         float64   // ThresholdPooled: tail share of the pooled rewards (0.025)
	Z            float64   // ThresholdGroupZ: outlier threshold in group stds (1.96)
	Alpha, Beta  float64   // score weights of reward difference and time decay (1, 1)
	Tau          float64   // decay time constant in training steps
	SimThreshold float64   // similarity at or above which two texts are "similar"
	SkipEdits    int       // a remembered answer is reused without sampling when its situation is within this many character edits of the agent's (a near-duplicate) ...
	SkipScore    float64   // ... and its entry scores at least this
	HintMax      int       // maximum bytes of retrieved answer added to a prompt
	NoHint       bool      // never add retrieved answers to prompts
	NoReuse      bool      // never answer from memory without sampling
	// PerStep evolves the memory once per training step, after sampling
	// (the update graph's memory node), instead of after every node
	// position during sampling. Per position (the default), a step's later
	// nodes and branch completions can already reuse what its earlier
	// groups found: on tasks that do not repeat across steps (Plan-Path
	// draws fresh grids every step) that is the only place where a
	// situation recurs.
	PerStep bool
	// Abstract, if set, names the environment whose situation abstraction
	// (envs.Situation) keys the memory instead of the raw observation: on
	// Plan-Path the local neighbourhood, the goal's direction and the other
	// agent's last message, which recur across grids, so the memory can
	// answer on grids it never saw. An observation the abstraction cannot
	// read keeps its raw text.
	Abstract string
}

// DefaultMemoryConfig: 64 entries, the pooled rule with 2.5% tails (the
// share of a normal distribution beyond 1.96σ, so the paper's intent at
// group sizes where its per-group rule cannot fire), z = 1.96 for the
// group rule, α = β = 1, τ = 50 steps, similarity 0.85, reuse of an answer
// whose situation is within 2 character edits (a near-duplicate) and whose
// entry scores ≥ 1, hints of at most 16 bytes.
//
// Why edits and not the trigram similarity: on Plan-Path the similarity of
// a planner observation to the same position with another tool suggestion
// (the same decision) is as low as 0.875 (6×6) and that to the neighbouring
// cell (another decision) as high as 0.882, so no similarity threshold
// tells them apart; in edits they are 1 (the suggestion's letter) against at
// least 3 (the agent's coordinate and its cell in the grid).
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{Capacity: 64, Threshold: ThresholdPooled, Tail: 0.025, Z: 1.96, Alpha: 1, Beta: 1, Tau: 50,
		SimThreshold: 0.85, SkipEdits: 2, SkipScore: 1, HintMax: 16}
}

// HintPrefix starts the text a hint appends to a prompt.
const HintPrefix = " h:"

// Score is an entry's worth at time now:
//
//	score = α·Diff + β·exp(−(now − Time)/τ)
//
// Diff rewards answers that beat their group by a wide margin; the decay
// term (1 when fresh, → 0 as the policy moves on) lets stale advice give way
// to newer evidence. Entries from the future (now < Time) count as fresh.
func (c MemoryConfig) Score(e Entry, now int64) float64 {
	age := float64(now - e.Time)
	if age < 0 {
		age = 0
	}
	decay := 0.0
	if c.Tau > 0 {
		decay = math.Exp(-age / c.Tau)
	}
	return c.Alpha*e.Diff + c.Beta*decay
}

// Similarity is a cheap text similarity in [0,1]: the Jaccard index of the
// two strings' character trigram sets, each string padded with one NUL on
// both sides so that short texts ("p1") still have trigrams. Equal strings
// score 1, strings with no trigram in common 0.
func Similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	return jaccard(trigrams(a), trigrams(b))
}

// trigrams returns the sorted, distinct trigram codes of s padded with a
// NUL on both sides: bytes b0 b1 b2 as b0<<16 | b1<<8 | b2. The empty
// string, whose padding is only two bytes, has the one code 1<<24 (no
// trigram has it).
func trigrams(s string) []uint32 {
	n := len(s) + 2
	if n < 3 {
		return []uint32{1 << 24}
	}
	at := func(i int) uint32 {
		if i == 0 || i == n-1 {
			return 0
		}
		return uint32(s[i-1])
	}
	out := make([]uint32, 0, n-2)
	for i := 0; i+3 <= n; i++ {
		out = append(out, at(i)<<16|at(i+1)<<8|at(i+2))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// jaccard is |a ∩ b| / |a ∪ b| of two sorted sets of distinct codes.
func jaccard(a, b []uint32) float64 {
	inter, i, j := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 1
	}
	return float64(inter) / float64(union)
}

// Memory is one agent's memory. It is safe for concurrent use.
type Memory struct {
	cfg     MemoryConfig
	mu      sync.Mutex
	entries []Entry
	grams   [][]uint32 // trigrams(entries[i].Situation), kept aligned with entries
}

// NewMemory returns an empty memory.
func NewMemory(cfg MemoryConfig) *Memory { return &Memory{cfg: cfg} }

// Entries returns a copy of the entries in insertion order.
func (m *Memory) Entries() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Entry(nil), m.entries...)
}

// Len is the number of entries.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Put adds e directly (no group statistics): into the slot of the most
// similar situation when its similarity reaches the threshold and e scores
// at least as well there, else into a free slot, else over the lowest
// scorer when e beats it. It reports what happened: "inserted",
// "replaced" or "" (kept out).
func (m *Memory) Put(e Entry, now int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(e, now)
}

func (m *Memory) put(e Entry, now int64) string {
	m.syncGrams()
	newScore := m.cfg.Score(e, now)
	g := trigrams(e.Situation)
	best, bestSim := -1, -1.0
	for i, x := range m.entries {
		if s := m.sim(i, x.Situation, e.Situation, g); s >= m.cfg.SimThreshold && s > bestSim {
			best, bestSim = i, s
		}
	}
	if best >= 0 {
		if newScore >= m.cfg.Score(m.entries[best], now) {
			m.entries[best], m.grams[best] = e, g
			return "replaced"
		}
		return ""
	}
	if len(m.entries) < m.cfg.Capacity {
		m.entries = append(m.entries, e)
		m.grams = append(m.grams, g)
		return "inserted"
	}
	low := -1
	for i, x := range m.entries {
		if low < 0 || m.cfg.Score(x, now) < m.cfg.Score(m.entries[low], now) {
			low = i
		}
	}
	if low >= 0 && newScore > m.cfg.Score(m.entries[low], now) {
		m.entries[low], m.grams[low] = e, g
		return "replaced"
	}
	return ""
}

// Remove deletes every entry whose situation is similar to situation and
// whose answer is similar to answer (advice that just led to a bad
// outcome), returning how many went.
func (m *Memory) Remove(situation, answer string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.remove(situation, answer)
}

func (m *Memory) remove(situation, answer string) int {
	m.syncGrams()
	g := trigrams(situation)
	kept, keptG := m.entries[:0], m.grams[:0]
	n := 0
	for i, x := range m.entries {
		if m.sim(i, x.Situation, situation, g) >= m.cfg.SimThreshold && Similarity(x.Answer, answer) >= m.cfg.SimThreshold {
			n++
			continue
		}
		kept, keptG = append(kept, x), append(keptG, m.grams[i])
	}
	m.entries, m.grams = kept, keptG
	return n
}

// syncGrams rebuilds the trigram cache if it is not aligned with the
// entries (entries set directly, as white-box tests do).
func (m *Memory) syncGrams() {
	if len(m.grams) == len(m.entries) {
		return
	}
	m.grams = make([][]uint32, len(m.entries))
	for i, x := range m.entries {
		m.grams[i] = trigrams(x.Situation)
	}
}

// sim is Similarity(entries[i].Situation, situation) from the cached
// trigrams of the entry and g = trigrams(situation).
func (m *Memory) sim(i int, entry, situation string, g []uint32) float64 {
	if entry == situation {
		return 1
	}
	return jaccard(m.grams[i], g)
}

// GroupUpdate is the outcome of Observe.
type GroupUpdate struct {
	Inserted, Replaced, Removed int
	Mean, Std                   float64
}

// Observe applies one GRPO group to the memory with the paper's rule: with
// μ and σ the mean and unbiased std of the group's memory rewards
// (accuracy + format),
//
//   - each answer with reward > μ + z·σ is Put with Diff = reward − μ;
//   - for each answer with reward < μ − z·σ, entries similar to it (similar
//     situation and similar answer) are removed.
//
// A group with σ = 0 changes nothing. Note that with the unbiased std no
// sample of a group of G can lie more than (G−1)/√G stds from the mean, so
// z = 1.96 needs G ≥ 6 to ever fire.
func (m *Memory) Observe(situation string, answers []string, rewards []float64, now int64) GroupUpdate {
	mean, std := grpo.MeanStd(rewards)
	return m.ObserveBounds(situation, answers, rewards, mean+m.cfg.Z*std, mean-m.cfg.Z*std, false, now)
}

// ObserveBounds applies one group with given bounds: an answer whose
// reward beats the group mean and passes hi (≥ hi when inclusive, else
// > hi) is Put with Diff = reward − mean; one that falls short of the mean
// and passes lo (≤ lo, or < lo) removes the entries similar to it. A group
// whose rewards are all equal changes nothing.
func (m *Memory) ObserveBounds(situation string, answers []string, rewards []float64, hi, lo float64, inclusive bool, now int64) GroupUpdate {
	mean, std := grpo.MeanStd(rewards)
	u := GroupUpdate{Mean: mean, Std: std}
	if std == 0 || len(answers) != len(rewards) {
		return u
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range rewards {
		up := r > hi || (inclusive && r == hi)
		down := r < lo || (inclusive && r == lo)
		switch {
		case r > mean && up:
			switch m.put(Entry{Situation: situation, Answer: answers[i], Reward: r, Diff: r - mean, Time: now}, now) {
			case "inserted":
				u.Inserted++
			case "replaced":
				u.Replaced++
			}
		case r < mean && down:
			u.Removed += m.remove(situation, answers[i])
		}
	}
	return u
}

// Quantile is the q-quantile of x by linear interpolation between order
// statistics (numpy's default, "type 7"); 0 for no values.
func Quantile(x []float64, q float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	q = math.Min(math.Max(q, 0), 1)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// Feedback reports the memory reward a trajectory earned after the agent
// answered situation with answer straight from memory (a skipped node).
// Skipped nodes form no group, so without this a wrong entry would never
// meet contrary evidence; here, when the outcome falls short of the entry's
// recorded reward, the shortfall is taken off its reward difference:
//
//	Diff ← Diff − (Reward − got)    when got < Reward
//
// which lowers its score below SkipScore (the answer is sampled again and
// can be replaced); an entry whose Diff drops to 0 or below is removed. It
// reports whether the entry was removed. (The paper does not spell out how
// memory answers are verified; this is the project's rule.)
func (m *Memory) Feedback(situation, answer string, got float64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, x := range m.entries {
		if x.Situation != situation || x.Answer != answer || got >= x.Reward {
			continue
		}
		m.entries[i].Diff -= x.Reward - got
		if m.entries[i].Diff <= 0 {
			m.syncGrams()
			m.entries = append(m.entries[:i], m.entries[i+1:]...)
			m.grams = append(m.grams[:i], m.grams[i+1:]...)
			return true
		}
		return false
	}
	return false
}

// Hit is a retrieved entry with its similarity and score.
type Hit struct {
	Entry
	Sim, Score float64
}

// Retrieve returns up to n entries whose situation is similar to
// situation, most similar first, ties by higher score then insertion order.
func (m *Memory) Retrieve(situation string, n int, now int64) []Hit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.retrieve(situation, n, now)
}

func (m *Memory) retrieve(situation string, n int, now int64) []Hit {
	m.syncGrams()
	if len(m.entries) == 0 {
		return nil
	}
	g := trigrams(situation)
	var hits []Hit
	for i, x := range m.entries {
		if s := m.sim(i, x.Situation, situation, g); s >= m.cfg.SimThreshold {
			hits = append(hits, Hit{Entry: x, Sim: s, Score: m.cfg.Score(x, now)})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Sim != hits[j].Sim {
			return hits[i].Sim > hits[j].Sim
		}
		return hits[i].Score > hits[j].Score
	})
	if len(hits) > n {
		hits = hits[:n]
	}
	return hits
}

// Skip returns the remembered answer when an entry's situation is a
// near-duplicate of situation (within SkipEdits character edits) and the
// entry scores at least SkipScore: the agent answers from memory instead of
// sampling (the "repetitive reasoning" memory removes).
func (m *Memory) Skip(situation string, now int64) (string, bool) {
	_, answer, skip := m.Advise(situation, now)
	return answer, skip
}

// Hint returns the text appended to a prompt for situation: HintPrefix and
// the best similar entry's answer, cut to HintMax bytes; "" when nothing is
// similar or hints are off. Contexts are short, so a hint is one answer.
func (m *Memory) Hint(situation string, now int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hint(m.retrieve(situation, 1, now))
}

func (m *Memory) hint(hits []Hit) string {
	if len(hits) == 0 || m.cfg.HintMax <= 0 || m.cfg.NoHint {
		return ""
	}
	a := hits[0].Answer
	if len(a) > m.cfg.HintMax {
		a = a[:m.cfg.HintMax]
	}
	return HintPrefix + a
}

// Advise is Skip and, when it does not skip, Hint, from one retrieval:
// the remembered answer and true, or the hint and false. Among the similar
// entries (most similar first), the first near-duplicate that scores at
// least SkipScore is reused.
func (m *Memory) Advise(situation string, now int64) (hint, answer string, skip bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hits := m.retrieve(situation, m.cfg.Capacity, now)
	if !m.cfg.NoReuse {
		for _, h := range hits {
			if h.Score >= m.cfg.SkipScore && WithinEdits(h.Situation, situation, m.cfg.SkipEdits) {
				return "", h.Answer, true
			}
		}
	}
	return m.hint(hits), "", false
}

// WithinEdits reports whether a and b are at most k character edits
// (insertions, deletions, substitutions of a byte) apart: the Levenshtein
// distance, computed only in the band |i − j| ≤ k, so in O(k·len).
func WithinEdits(a, b string, k int) bool {
	if k < 0 {
		return false
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) > k {
		return false
	}
	if a == b {
		return true
	}
	const far = 1 << 30
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = far
		if j <= k {
			prev[j] = j
		}
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-k), min(len(b), i+k)
		for j := range cur {
			cur[j] = far
		}
		if i <= k {
			cur[0] = i
		}
		best := cur[0]
		for j := lo; j <= hi; j++ {
			d := prev[j-1]
			if a[i-1] != b[j-1] {
				d++
			}
			d = min(d, prev[j]+1, cur[j-1]+1)
			cur[j] = d
			best = min(best, d)
		}
		if best > k {
			return false
		}
		prev, cur = cur, prev
	}
	return prev[len(b)] <= k
}
