package cpu

import "math"

// Reference kernels of the matmuls, loss heads, pointwise ops and the
// optimizer: short, single-threaded, obviously right (float64
// accumulation). They define what the fast kernels and the CUDA kernels
// must compute; NewReference runs a Backend on them.

func refMatmulForward(out, inp, weight, bias []float32, N, C, OC int) {
	for n := 0; n < N; n++ {
		for o := 0; o < OC; o++ {
			var s float64
			if bias != nil {
				s = float64(bias[o])
			}
			for c := 0; c < C; c++ {
				s += float64(inp[n*C+c]) * float64(weight[o*C+c])
			}
			out[n*OC+o] = float32(s)
		}
	}
}

func refMatmulBackward(dinp, dweight, dbias, dout, inp, weight []float32, N, C, OC int) {
	if dinp != nil {
		for n := 0; n < N; n++ {
			for c := 0; c < C; c++ {
				var s float64
				for o := 0; o < OC; o++ {
					s += float64(dout[n*OC+o]) * float64(weight[o*C+c])
				}
				dinp[n*C+c] += float32(s)
			}
		}
	}
	if dweight != nil {
		for o := 0; o < OC; o++ {
			for c := 0; c < C; c++ {
				var s float64
				for n := 0; n < N; n++ {
					s += float64(dout[n*OC+o]) * float64(inp[n*C+c])
				}
				dweight[o*C+c] += float32(s)
			}
		}
	}
	if dbias != nil {
		for o := 0; o < OC; o++ {
			var s float64
			for n := 0; n < N; n++ {
				s += float64(dout[n*OC+o])
			}
			dbias[o] += float32(s)
		}
	}
}

func refResidualForward(out, a, b []float32, N int) {
	for i := 0; i < N; i++ {
		out[i] = a[i] + b[i]
	}
}

func refScale(x []float32, s float32, N int) {
	for i := 0; i < N; i++ {
		x[i] *= s
	}
}

// refSoftmaxRow writes softmax(logits) into probs and returns log-sum-exp.
func refSoftmaxRow(probs, logits []float32) float64 {
	maxv := math.Inf(-1)
	for _, v := range logits {
		maxv = math.Max(maxv, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - maxv)
	}
	lse := maxv + math.Log(sum)
	for i, v := range logits {
		probs[i] = float32(math.Exp(float64(v) - lse))
	}
	return lse
}

func refCrossEntropyForward(losses, probs, logits []float32, targets []int32, N, V int) {
	for n := 0; n < N; n++ {
		l := logits[n*V:][:V]
		tgt := float64(l[targets[n]])
		lse := refSoftmaxRow(probs[n*V:][:V], l)
		losses[n] = float32(lse - tgt)
	}
}

func refCrossEntropyBackward(dlogits, probs, dlosses []float32, targets []int32, N, V int) {
	for n := 0; n < N; n++ {
		for v := 0; v < V; v++ {
			ind := float32(0)
			if int32(v) == targets[n] {
				ind = 1
			}
			dlogits[n*V+v] += (probs[n*V+v] - ind) * dlosses[n]
		}
	}
}

func refLogProbForward(logp, probs, logits []float32, targets []int32, N, V int) {
	for n := 0; n < N; n++ {
		l := logits[n*V:][:V]
		tgt := float64(l[targets[n]])
		lse := refSoftmaxRow(probs[n*V:][:V], l)
		logp[n] = float32(tgt - lse)
	}
}

func refLogProbBackward(dlogits, probs, dlogp []float32, targets []int32, N, V int) {
	for n := 0; n < N; n++ {
		for v := 0; v < V; v++ {
			ind := float32(0)
			if int32(v) == targets[n] {
				ind = 1
			}
			dlogits[n*V+v] += dlogp[n] * (ind - probs[n*V+v])
		}
	}
}

func refAdamW(params, grads, m, v []float32, N int, lr, b1, b2, eps, wd, scale float32, step int) {
	c1 := 1 - math.Pow(float64(b1), float64(step))
	c2 := 1 - math.Pow(float64(b2), float64(step))
	for i := 0; i < N; i++ {
		g := float64(grads[i]) * float64(scale)
		mi := float64(b1)*float64(m[i]) + (1-float64(b1))*g
		vi := float64(b2)*float64(v[i]) + (1-float64(b2))*g*g
		m[i], v[i] = float32(mi), float32(vi)
		upd := (mi/c1)/(math.Sqrt(vi/c2)+float64(eps)) + float64(wd)*float64(params[i])
		params[i] = float32(float64(params[i]) - float64(lr)*upd)
	}
}

func refSumSquares(x []float32, N int) float64 {
	var s float64
	for i := 0; i < N; i++ {
		s += float64(x[i]) * float64(x[i])
	}
	return s
}

func refTranspose(dst, src []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			dst[c*rows+r] = src[r*cols+c]
		}
	}
}

func refMatmulForwardT(out, inp, weightT, bias []float32, N, C, OC int) {
	for n := 0; n < N; n++ {
		for o := 0; o < OC; o++ {
			var s float64
			if bias != nil {
				s = float64(bias[o])
			}
			for c := 0; c < C; c++ {
				s += float64(inp[n*C+c]) * float64(weightT[c*OC+o])
			}
			out[n*OC+o] = float32(s)
		}
	}
}

// maxRef is max(x) (x not empty), maxVec's reference.
func maxRef(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	return m
}

// scaleRef sets x[i] *= s, scaleVec's reference.
func scaleRef(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}
