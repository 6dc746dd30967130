package gemm

import (
	"sync"

	"troupe/gpu/compute/cpu/internal/par"
)

// Blocking follows the BLIS/GotoBLAS scheme: C is computed in mr×nr tiles by
// a micro-kernel reading packed A (mc×kc block, sized for L2) and packed B
// (kc×nc block; one kc×nr micro-panel stays in L1 across the ir loop). The
// tile and the kc, mc, nc sizes belong to the kernel (isa.go) and are
// derived from the measured cache sizes.
const (
	// rowsMaxM: products with fewer rows and B not transposed take the
	// row path (generation with batch 1).
	rowsMaxM = 6

	// directMaxM: with at most this many rows of C, an NN product reads B in
	// place instead of packing it (packing B would cost as much as the
	// multiply when few rows reuse it).
	directMaxM = 48

	// parMinWork: below this many multiply-adds (about 55 µs on one core)
	// one goroutine is as fast as paying for a fork/join (1-2 µs when the
	// worker is awake, more when it must be woken; BenchmarkForkJoin).
	parMinWork = 1 << 21

	// rowSplitMin: products with A in place and at least this many rows
	// per part are split by rows (see sgemm).
	rowSplitMin = 64

	// prepackMax: a row-split product whose packed B has at most this many
	// elements (8 MiB, within L3) packs B once, its column panels shared
	// out among the parts, instead of every part packing all of it (see
	// prepackB).
	prepackMax = 2 << 20
)

// workspace holds one goroutine's packing buffers; pooled so steady-state
// calls do not allocate.
type workspace struct {
	ap  []float32
	bp  []float32
	tmp [maxMR * maxNR]float32
}

var wsPool = sync.Pool{New: func() any { return new(workspace) }}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// sgemm handles the degenerate cases and splits the work across goroutines.
// With bias (length n), C's rows are first set to bias and beta is 1: each
// part fills its own block of C just before computing it.
func (e *Engine) sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if bias != nil {
		beta = 1
	}
	if k == 0 || alpha == 0 {
		fillBias(bias, c, ldc, 0, m, 0, n)
		scaleC(m, n, beta, c, ldc)
		return
	}
	kn, threads := e.kn, e.threads
	if m < rowsMaxM && !transB {
		fillBias(bias, c, ldc, 0, m, 0, n)
		e.rows(transA, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m < rowsMaxM && e.gemvPath {
		fillBias(bias, c, ldc, 0, m, 0, n)
		e.gemvRows(transA, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m < dotMaxM && transB && !transA && k >= 16 && e.dotOK() {
		fillBias(bias, c, ldc, 0, m, 0, n)
		e.dotNT(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if threads > 1 && m*n*k >= parMinWork {
		if splitM, tiles, ok := split(kn, threads, transA, m, n); ok {
			j := jobPool.Get().(*job)
			*j = job{e: e, splitM: splitM, units: tiles, parts: min(threads, tiles),
				transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
				a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, bias: bias}
			var pre *[]float32
			if splitM && n <= kn.nc && (transB || e.packNN && m/j.parts > directMaxM) {
				ncPad := (n + kn.nr - 1) / kn.nr * kn.nr
				if k*ncPad <= prepackMax {
					pre = prePool.Get().(*[]float32)
					*pre = grow(*pre, k*ncPad)
					prepackB(kn, j.parts, *pre, transB, n, k, b, ldb)
					j.pre = *pre
				}
			}
			j.fork()
			if pre != nil {
				prePool.Put(pre)
			}
			return
		}
	}
	fillBias(bias, c, ldc, 0, m, 0, n)
	ws := wsPool.Get().(*workspace)
	e.block(ws, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
	wsPool.Put(ws)
}

// split chooses how a product is divided among goroutines. Each part packs
// its own copy of the operand that is not split: split M and every part
// packs all of B; split N and every part packs all of A, which costs
// nothing when A is read in place (not transposed). With many rows, split
// M anyway: the extra packing of B is 1/m of the work, and each core then
// reads and writes whole rows, the same row halves the row-parallel kernels
// around the product use, so A and C stay in that core's cache instead of
// crossing to the other core (which costs more than the packing).
// Otherwise duplicate the smaller packing, as long as each part gets a
// couple of tiles.
func split(kn *kernel, threads int, transA bool, m, n int) (splitM bool, tiles int, ok bool) {
	mt, nt := (m+kn.mr-1)/kn.mr, (n+kn.nr-1)/kn.nr
	switch {
	case nt < 2*threads:
		splitM = true
	case mt < 2*threads:
		splitM = false
	case !transA:
		splitM = m >= rowSplitMin*threads
	default:
		splitM = n <= m
	}
	tiles = nt
	if splitM {
		tiles = mt
	}
	return splitM, tiles, min(threads, tiles) > 1
}

// fillBias sets rows [i0,i1), columns [j0,j1) of C to bias (nothing when
// bias is nil).
func fillBias(bias, c []float32, ldc, i0, i1, j0, j1 int) {
	if bias == nil {
		return
	}
	row := bias[j0:j1]
	for i := i0; i < i1; i++ {
		copy(c[i*ldc+j0:i*ldc+j1], row)
	}
}

// job is one Sgemm call split into parts: parts of the row tiles (splitM),
// of the column tiles, or (rows mode) of 64-column chunks. Jobs are pooled
// and the parts run on par's persistent workers, so a parallel call does not
// allocate.
type job struct {
	e             *Engine
	rowsMode      bool
	splitM        bool
	units, parts  int
	transA        bool
	transB        bool
	m, n, k       int
	alpha, beta   float32
	a, b, c       []float32
	lda, ldb, ldc int
	bias          []float32 // nil, or the row C starts from (beta is 1)
	pre           []float32 // nil, or all of B packed (prepackB; splitM only)
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

// fork runs the parts (part 0 on the calling goroutine), then recycles the
// job.
func (j *job) fork() {
	par.Run(j.parts, j)
	*j = job{} // drop references to the caller's matrices
	jobPool.Put(j)
}

// Run computes part t (par.Task).
func (j *job) Run(t int) { j.run(t) }

func (j *job) run(t int) {
	lo, hi := t*j.units/j.parts, (t+1)*j.units/j.parts
	if j.rowsMode {
		rowRange(j.e.kn, j.transA, j.m, lo*rowChunk, min(hi*rowChunk, j.n), j.k, j.alpha, j.a, j.lda, j.b, j.ldb, j.beta, j.c, j.ldc)
		return
	}
	kn := j.e.kn
	ws := wsPool.Get().(*workspace)
	if j.splitM {
		i0, i1 := lo*kn.mr, min(hi*kn.mr, j.m)
		var aa []float32
		if j.transA {
			aa = j.a[i0:]
		} else {
			aa = j.a[i0*j.lda:]
		}
		fillBias(j.bias, j.c, j.ldc, i0, i1, 0, j.n)
		j.e.block(ws, j.transA, j.transB, i1-i0, j.n, j.k, j.alpha, aa, j.lda, j.b, j.ldb, j.beta, j.c[i0*j.ldc:], j.ldc, j.pre)
	} else {
		j0, j1 := lo*kn.nr, min(hi*kn.nr, j.n)
		var bb []float32
		if j.transB {
			bb = j.b[j0*j.ldb:]
		} else {
			bb = j.b[j0:]
		}
		fillBias(j.bias, j.c, j.ldc, 0, j.m, j0, j1)
		j.e.block(ws, j.transA, j.transB, j.m, j1-j0, j.k, j.alpha, j.a, j.lda, bb, j.ldb, j.beta, j.c[j0:], j.ldc, nil)
	}
	wsPool.Put(ws)
}

// rows computes products with fewer than rowsMaxM rows and B not
// transposed one C row at a time, reading B in place: packing B would cost
// as much as the multiply. Large ones split the columns across goroutines.
func (e *Engine) rows(transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	parts := min(e.threads, n/rowChunk)
	if m*n*k < parMinWork || parts < 2 {
		rowRange(e.kn, transA, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	j := jobPool.Get().(*job)
	*j = job{e: e, rowsMode: true, units: (n + rowChunk - 1) / rowChunk, parts: parts,
		transA: transA, m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc}
	j.fork()
}

// rowChunk is the column granularity of the rows path's split (the
// assembly's wide step).
const rowChunk = 64

// rowRange computes columns [j0, j1) of every C row for rows. It walks
// 64-column blocks of B on the outside so that, with several rows, a block
// (k×64) is read from memory once and from cache for the other rows.
func rowRange(kn *kernel, transA bool, m, j0, j1, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for jb := j0; jb < j1; jb += rowChunk {
		je := min(jb+rowChunk, j1)
		for i := 0; i < m; i++ {
			var arow []float32
			aps := 1
			if transA {
				arow, aps = a[i:], lda
			} else {
				arow = a[i*lda:]
			}
			crow := c[i*ldc+jb : i*ldc+je]
			done := rowAsm(kn, k, arow, aps, b[jb:], ldb, crow, je-jb, alpha, beta)
			// Remaining columns (all of them without the assembly): scale
			// by beta, then add alpha*a[p]*B[p, :] row by row.
			rest := crow[done:]
			if len(rest) == 0 {
				continue
			}
			scaleC(1, len(rest), beta, rest, len(rest))
			for p := 0; p < k; p++ {
				av := alpha * arow[p*aps]
				brow := b[p*ldb+jb+done : p*ldb+je]
				for j, bv := range brow {
					rest[j] += av * bv
				}
			}
		}
	}
}

// prePool holds prepackB's buffers.
var prePool = sync.Pool{New: func() any { return new([]float32) }}

// prepackTask packs a share of B's column panels for prepackB.
type prepackTask struct {
	kn            *kernel
	dst, b        []float32
	transB        bool
	n, k, ldb     int
	panels, parts int
}

func (t *prepackTask) Run(part int) {
	kn := t.kn
	r0, r1 := part*t.panels/t.parts*kn.nr, min((part+1)*t.panels/t.parts*kn.nr, t.n)
	if r0 >= r1 {
		return
	}
	ncPad := (t.n + kn.nr - 1) / kn.nr * kn.nr
	kcb := kn.kcFor(t.k)
	for pc := 0; pc < t.k; pc += kcb {
		kc := min(kcb, t.k-pc)
		packB(kn, t.dst[pc*ncPad+r0*kc:], t.transB, t.b, t.ldb, pc, r0, kc, r1-r0)
	}
}

var prepackPool = sync.Pool{New: func() any { return new(prepackTask) }}

// prepackB packs all of op(B) (k×n, n <= kn.nc) into dst in block's
// layout, the parts packing disjoint column panels at once: the k block
// starting at pc is at pc*ncPad, its panel r at pc*ncPad + r*nr*kc. A
// row-split product then shares one packing of B (each part packing all of
// it cost 5% of a training step, the parts' rows being few).
func prepackB(kn *kernel, parts int, dst []float32, transB bool, n, k int, b []float32, ldb int) {
	t := prepackPool.Get().(*prepackTask)
	panels := (n + kn.nr - 1) / kn.nr
	*t = prepackTask{kn: kn, dst: dst, b: b, transB: transB, n: n, k: k, ldb: ldb,
		panels: panels, parts: min(parts, panels)}
	par.Run(t.parts, t)
	*t = prepackTask{}
	prepackPool.Put(t)
}

// block is the single-goroutine blocked algorithm (loops jc, pc, ic, jr,
// ir). pre, if not nil, is all of B packed by prepackB (n <= kn.nc).
//
// Packing: A is read in place by the kernel when it is not transposed (mr
// row streams) and, with e.packTransA off, when it is; B is read in place
// for NN products with few rows (or always, with e.packNN off). Ragged
// edge panels are always packed (zero padded) so the kernel never reads
// outside the matrices.
func (e *Engine) block(ws *workspace, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, pre []float32) {
	kn := e.kn
	mr, nr := kn.mr, kn.nr
	aDirect := !transA || !e.packTransA
	bDirect := !transB && (m <= directMaxM || !e.packNN) && pre == nil
	kcb := kn.kcFor(k)
	for jc := 0; jc < n; jc += kn.nc {
		nc := min(kn.nc, n-jc)
		ncPad := (nc + nr - 1) / nr * nr
		ncFull := nc / nr * nr
		for pc := 0; pc < k; pc += kcb {
			kc := min(kcb, k-pc)
			betaEff := beta
			if pc > 0 {
				betaEff = 1 // later k blocks accumulate into the partial sums
			}
			bp := ws.bp
			if pre != nil {
				bp = pre[pc*ncPad : pc*ncPad+kc*ncPad]
			} else if !bDirect {
				ws.bp = grow(ws.bp, kc*ncPad)
				bp = ws.bp
				packB(kn, bp, transB, b, ldb, pc, jc, kc, nc)
			} else if ncFull < nc {
				// Only the ragged last panel needs packing.
				ws.bp = grow(ws.bp, kc*nr)
				packB(kn, ws.bp, false, b, ldb, pc, jc+ncFull, kc, nc-ncFull)
			}
			for ic := 0; ic < m; ic += kn.mc {
				mc := min(kn.mc, m-ic)
				mcFull := mc / mr * mr
				if !aDirect {
					ws.ap = grow(ws.ap, (mc+mr-1)/mr*mr*kc)
					packA(kn, ws.ap, transA, a, lda, ic, pc, mc, kc)
				} else if mcFull < mc {
					ws.ap = grow(ws.ap, mr*kc)
					packA(kn, ws.ap, transA, a, lda, ic+mcFull, pc, mc-mcFull, kc)
				}
				for jr := 0; jr < nc; jr += nr {
					cols := min(nr, nc-jr)
					var bpan []float32
					bps := nr
					switch {
					case !bDirect:
						bpan = bp[jr*kc : (jr+nr)*kc]
					case cols == nr:
						bpan = b[pc*ldb+jc+jr:]
						bps = ldb
					default:
						bpan = ws.bp[:kc*nr]
					}
					// Full row tiles of a full column panel: one call.
					irStart := 0
					if cols == nr && mcFull > 0 {
						var apan []float32
						ars, aps, anext := 1, mr, mr*kc
						switch {
						case !aDirect:
							apan = ws.ap
						case transA:
							apan = a[pc*lda+ic:]
							ars, aps, anext = 1, lda, mr
						default:
							apan = a[ic*lda+pc:]
							ars, aps, anext = lda, 1, mr*lda
						}
						kn.fn(mcFull/mr, kc, apan, ars, aps, anext, bpan, bps, c[ic*ldc+jc+jr:], ldc, alpha, betaEff)
						irStart = mcFull
					}
					// Edge tiles: compute into a scratch tile, then merge only
					// the valid part.
					for ir := irStart; ir < mc; ir += mr {
						rows := min(mr, mc-ir)
						var apan []float32
						ars, aps := 1, mr
						switch {
						case !aDirect:
							apan = ws.ap[ir*kc : (ir+mr)*kc]
						case rows < mr:
							apan = ws.ap[:mr*kc]
						case transA:
							apan = a[pc*lda+ic+ir:]
							ars, aps = 1, lda
						default:
							apan = a[(ic+ir)*lda+pc:]
							ars, aps = lda, 1
						}
						kn.fn(1, kc, apan, ars, aps, 0, bpan, bps, ws.tmp[:mr*nr], nr, alpha, 0)
						mergeTile(ws.tmp[:mr*nr], nr, c[(ic+ir)*ldc+jc+jr:], ldc, rows, cols, betaEff)
					}
				}
			}
		}
	}
}

// mergeTile writes the rows×cols corner of a scratch tile t (row stride
// ldt) into C: C = t + beta*C, C not read when beta is 0.
func mergeTile(t []float32, ldt int, c []float32, ldc, rows, cols int, beta float32) {
	for i := 0; i < rows; i++ {
		crow := c[i*ldc : i*ldc+cols]
		trow := t[i*ldt : i*ldt+cols]
		if beta == 0 {
			copy(crow, trow)
			continue
		}
		for j, v := range trow {
			crow[j] = v + beta*crow[j]
		}
	}
}

// scaleC sets C = beta*C (C = 0 when beta is 0, without reading C).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// packA copies op(A)[i0:i0+mc, p0:p0+kc] into dst as mr-row
// micro-panels: panel q holds element (i, p) at q*mr*kc + p*mr + i. Rows past
// mc are zero so edge tiles can use the full kernel.
func packA(kn *kernel, dst []float32, transA bool, a []float32, lda, i0, p0, mc, kc int) {
	mr := kn.mr
	full := mc / mr * mr // rows in complete panels
	if transA && full > 0 {
		// op(A)(i, p) = a[p*lda+i]: walk the stored rows of A contiguously
		// and deal each mr-value run into its panel (row-by-row reads avoid
		// large-stride cache conflicts).
		p := 0
		if kn.asm && kn.packAT != nil {
			p = kn.packAT(dst, a[p0*lda+i0:], lda, kc, full/mr)
		}
		for ; p < kc; p++ {
			src := a[(p0+p)*lda+i0 : (p0+p)*lda+i0+full]
			for q := 0; q < full; q += mr {
				copy(dst[q*kc+p*mr:q*kc+p*mr+mr], src[q:q+mr])
			}
		}
	}
	for q := 0; q < mc; q += mr {
		rows := min(mr, mc-q)
		d := dst[q*kc : (q+mr)*kc]
		switch {
		case transA && rows == mr:
			// Done above.
		case !transA && rows == mr && mr == 6:
			base := (i0+q)*lda + p0
			r0 := a[base : base+kc]
			r1 := a[base+lda : base+lda+kc]
			r2 := a[base+2*lda : base+2*lda+kc]
			r3 := a[base+3*lda : base+3*lda+kc]
			r4 := a[base+4*lda : base+4*lda+kc]
			r5 := a[base+5*lda : base+5*lda+kc]
			for p := range r0 {
				dd := (*[6]float32)(d[p*6:])
				dd[0], dd[1], dd[2] = r0[p], r1[p], r2[p]
				dd[3], dd[4], dd[5] = r3[p], r4[p], r5[p]
			}
		case !transA:
			for i := 0; i < mr; i++ {
				if i >= rows {
					for p := 0; p < kc; p++ {
						d[p*mr+i] = 0
					}
					continue
				}
				src := a[(i0+q+i)*lda+p0 : (i0+q+i)*lda+p0+kc]
				for p, v := range src {
					d[p*mr+i] = v
				}
			}
		default:
			for p := 0; p < kc; p++ {
				src := a[(p0+p)*lda+i0+q : (p0+p)*lda+i0+q+rows]
				dd := d[p*mr : p*mr+mr]
				copy(dd, src)
				clear(dd[rows:])
			}
		}
	}
}

// packB copies op(B)[p0:p0+kc, j0:j0+nc] into dst as nr-column
// micro-panels: panel r holds element (p, j) at r*nr*kc + p*nr + j. Columns
// past nc are zero.
func packB(kn *kernel, dst []float32, transB bool, b []float32, ldb, p0, j0, kc, nc int) {
	nr := kn.nr
	for r := 0; r < nc; r += nr {
		cols := min(nr, nc-r)
		d := dst[r*kc : (r+nr)*kc]
		switch {
		case !transB && cols == nr:
			if packBNAsm(kn, d, b[p0*ldb+j0+r:], ldb, kc) {
				continue
			}
			for p := 0; p < kc; p++ {
				copy(d[p*nr:p*nr+nr], b[(p0+p)*ldb+j0+r:])
			}
		case transB && cols == nr:
			// op(B)(p, j) = b[j*ldb+p]: transpose nr rows of B, 16 at a
			// time in assembly.
			done := kc
			for j := 0; j < nr; j += 16 {
				done = min(done, packBTAsm(kn, d[j:], b[(j0+r+j)*ldb+p0:], ldb, kc, nr))
			}
			for j := 0; j < nr; j++ {
				src := b[(j0+r+j)*ldb+p0+done : (j0+r+j)*ldb+p0+kc]
				for p, v := range src {
					d[(done+p)*nr+j] = v
				}
			}
		default:
			for p := 0; p < kc; p++ {
				dd := d[p*nr : p*nr+nr]
				if transB {
					for j := 0; j < cols; j++ {
						dd[j] = b[(j0+r+j)*ldb+p0+p]
					}
				} else {
					copy(dd, b[(p0+p)*ldb+j0+r:(p0+p)*ldb+j0+r+cols])
				}
				clear(dd[cols:])
			}
		}
	}
}
