package trainer

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"troupe/actors"
)

// A run with rollout workers resumes too, though not bit for bit: which
// weights version samples a chunk depends on how the workers and the
// learner were scheduled, so two uninterrupted runs already differ (with
// MaxStaleness 0 every chunk of step s is sampled by version s and they do
// not: such a run resumes exactly). What a resumed asynchronous run keeps
// is this:
//
//   - no step is lost or done twice: the learner's version is the
//     checkpoint's step, the run continues at the next one, and
//     metrics.jsonl holds every step once;
//   - no optimiser state is lost: the learner's weights, AdamW moments and
//     step counts are the checkpoint's (as in a synchronous run);
//   - no sample is lost: every chunk the workers had streamed and the
//     learner not yet trained on is in the checkpoint (algorithm/chunks/),
//     with its behaviour version and log-probs, and is trained on after
//     the resume as it would have been; the chunks not in yet are sampled
//     again from the same environments and sampling seeds (both derive
//     from the seed, the step and the chunk) by the restored version,
//     which the staleness bound allows (the learner's own);
//   - the staleness bound holds across the resume, each sample keeping the
//     version that sampled it.
//
// Restoring the learner after it was lost (Options.Recover) goes through
// the same state: the workers drop the chunks they were sampling for the
// learner that went back and sample them again.

// asyncState is algorithm/async.json.
type asyncState struct {
	Steps  int64    `json:"steps"`  // the learner's version
	Chunks []string `json:"chunks"` // the files in chunks/, in order
}

const (
	asyncStateFile = "async.json"
	asyncChunkDir  = "chunks"
	chunkFormat    = 1
)

// ErrChunk reports a saved chunk file that cannot be decoded or does not
// belong to the run.
var ErrChunk = errors.New("trainer: bad saved chunk")

// savedChunk is one chunk file: a format number and the chunk.
type savedChunk struct {
	Format int
	Chunk  chunkResult
}

// encodeChunk is the bytes of a chunk file.
func encodeChunk(c chunkResult) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(savedChunk{Format: chunkFormat, Chunk: c}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeChunk decodes a chunk file and checks it against the run: a chunk
// of a step at or after learner version from, of one of chunks chunks,
// sampled by a version at most maxStale behind its step and not after the
// learner's, every sample stamped with that version.
func decodeChunk(b []byte, from int64, chunks, maxStale int) (chunkResult, error) {
	var sc savedChunk
	dec := gob.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&sc); err != nil {
		return chunkResult{}, fmt.Errorf("%w: %v", ErrChunk, err)
	}
	c := sc.Chunk
	switch {
	case sc.Format != chunkFormat:
		return c, fmt.Errorf("%w: format %d (this program reads %d)", ErrChunk, sc.Format, chunkFormat)
	case c.Step < from:
		return c, fmt.Errorf("%w: step %d, trained before the checkpoint's version %d", ErrChunk, c.Step, from)
	case c.Chunk < 0 || c.Chunk >= chunks:
		return c, fmt.Errorf("%w: chunk %d of %d", ErrChunk, c.Chunk, chunks)
	case c.Version < 0 || c.Version > from || c.Step-c.Version > int64(maxStale):
		return c, fmt.Errorf("%w: step %d sampled by version %d (learner version %d, max staleness %d)", ErrChunk, c.Step, c.Version, from, maxStale)
	}
	for name, b := range c.Buffers {
		for i := range b {
			if b[i].Version != c.Version {
				return c, fmt.Errorf("%w: %s sample %d has version %d in a chunk of version %d", ErrChunk, name, i, b[i].Version, c.Version)
			}
		}
	}
	return c, nil
}

func chunkFile(step int64, chunk int) string {
	return fmt.Sprintf("step%08d-chunk%04d.gob", step, chunk)
}

// SaveState implements Resumable: the learner's version and every chunk
// streamed to the learner and not yet trained on.
func (a *asyncATGRPO) SaveState(ctx context.Context, dir string) error {
	if a.t == nil {
		return fmt.Errorf("%w: %s with rollout workers saved before Start", ErrAlgorithm, a.Name())
	}
	type queued struct {
		u unit
		f *actors.Future[chunkResult]
	}
	a.mu.Lock()
	st := asyncState{Steps: a.step, Chunks: []string{}}
	var qs []queued
	for s, d := range a.done {
		for c, f := range d {
			if f != nil {
				qs = append(qs, queued{unit{step: s, chunk: c}, f})
			}
		}
	}
	a.mu.Unlock()
	slices.SortFunc(qs, func(x, y queued) int {
		if x.u.step != y.u.step {
			return int(x.u.step - y.u.step)
		}
		return x.u.chunk - y.u.chunk
	})
	if len(qs) > 0 {
		if err := os.MkdirAll(filepath.Join(dir, asyncChunkDir), 0o755); err != nil {
			return err
		}
	}
	for _, q := range qs {
		res, err := q.f.Get(ctx)
		if err != nil {
			return fmt.Errorf("step %d chunk %d from the object store: %w", q.u.step, q.u.chunk, err)
		}
		b, err := encodeChunk(res)
		if err != nil {
			return fmt.Errorf("step %d chunk %d: %w", q.u.step, q.u.chunk, err)
		}
		name := chunkFile(q.u.step, q.u.chunk)
		if err := os.WriteFile(filepath.Join(dir, asyncChunkDir, name), b, 0o644); err != nil {
			return err
		}
		st.Chunks = append(st.Chunks, name)
	}
	return writeJSON(filepath.Join(dir, asyncStateFile), st)
}

// LoadState implements Resumable: the learner publishes its restored
// version, the saved chunks go back in the object store for the learner,
// and the workers drop what they were sampling and sample the chunks still
// missing.
func (a *asyncATGRPO) LoadState(ctx context.Context, dir string, step int) error {
	if a.t == nil {
		return fmt.Errorf("%w: %s with rollout workers restored before Start", ErrAlgorithm, a.Name())
	}
	var st asyncState
	if err := readJSON(filepath.Join(dir, asyncStateFile), &st); err != nil {
		return err
	}
	if st.Steps != int64(step) {
		return fmt.Errorf("%w: learner version %d in a checkpoint of step %d", ErrResume, st.Steps, step)
	}
	restored := map[int64][]*actors.Future[chunkResult]{}
	release := func() {
		for _, d := range restored {
			for _, f := range d {
				if f != nil {
					f.Release()
				}
			}
		}
	}
	for _, name := range st.Chunks {
		if name != filepath.Base(name) || !strings.HasSuffix(name, ".gob") {
			release()
			return fmt.Errorf("%w: chunk file name %q", ErrChunk, name)
		}
		b, err := os.ReadFile(filepath.Join(dir, asyncChunkDir, name))
		if err != nil {
			release()
			return err
		}
		c, err := decodeChunk(b, st.Steps, a.chunks, a.opts.MaxStaleness)
		if err != nil {
			release()
			return fmt.Errorf("%s: %w", name, err)
		}
		d := restored[c.Step]
		if d == nil {
			d = make([]*actors.Future[chunkResult], a.chunks)
			restored[c.Step] = d
		}
		if d[c.Chunk] != nil {
			release()
			return fmt.Errorf("%w: %s: step %d chunk %d saved twice", ErrChunk, name, c.Step, c.Chunk)
		}
		if d[c.Chunk], err = actors.Put(ctx, a.t.Runtime(), c); err != nil {
			release()
			return err
		}
	}
	pub, err := a.t.Team().Publish(ctx, st.Steps)
	if err != nil {
		release()
		return err
	}
	a.mu.Lock()
	for _, d := range a.done {
		for _, f := range d {
			if f != nil {
				f.Release()
			}
		}
	}
	a.epoch++
	a.done, a.retry, a.pulls = restored, nil, nil
	a.step, a.next, a.nextChunk, a.consumed = st.Steps, st.Steps, 0, st.Steps
	a.published = pub
	if a.alive > 0 {
		a.failed = nil
	}
	a.open = true
	a.cond.Broadcast()
	a.mu.Unlock()
	a.t.logf("rollout workers: learner version %d restored with %d chunk(s) sampled before the checkpoint; the others are sampled again", st.Steps, len(st.Chunks))
	return nil
}
