package cpu

import "math"

// Reference kernels: short, single-threaded, obviously right (llm.c's
// train_gpt2.c transcribed, with float64 accumulation). They define what the
// fast kernels and the CUDA kernels must compute; NewReference runs a
// Backend on them.

func refEncoderForward(out []float32, inp []int32, wte, wpe []float32, B, T, C int) {
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			o := out[(b*T+t)*C:][:C]
			w := wte[int(inp[b*T+t])*C:][:C]
			p := wpe[t*C:][:C]
			for i := range o {
				o[i] = w[i] + p[i]
			}
		}
	}
}

func refEncoderBackward(dwte, dwpe, dout []float32, inp []int32, B, T, C int) {
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			d := dout[(b*T+t)*C:][:C]
			w := dwte[int(inp[b*T+t])*C:][:C]
			for i := range d {
				w[i] += d[i]
				if dwpe != nil {
					dwpe[t*C+i] += d[i]
				}
			}
		}
	}
}

func refLayerNormForward(out, mean, rstd, inp, weight, bias []float32, N, C int) {
	for n := 0; n < N; n++ {
		x := inp[n*C:][:C]
		var m float64
		for _, v := range x {
			m += float64(v)
		}
		m /= float64(C)
		var vr float64
		for _, v := range x {
			d := float64(v) - m
			vr += d * d
		}
		vr /= float64(C)
		s := 1 / math.Sqrt(vr+1e-5)
		o := out[n*C:][:C]
		for i, v := range x {
			o[i] = float32((float64(v)-m)*s)*weight[i] + bias[i]
		}
		mean[n], rstd[n] = float32(m), float32(s)
	}
}

func refLayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd []float32, N, C int) {
	for n := 0; n < N; n++ {
		x, d, di := inp[n*C:][:C], dout[n*C:][:C], dinp[n*C:][:C]
		m, s := float64(mean[n]), float64(rstd[n])
		var dnormMean, dnormNormMean float64
		for i := range x {
			norm := (float64(x[i]) - m) * s
			dnorm := float64(weight[i]) * float64(d[i])
			dnormMean += dnorm
			dnormNormMean += dnorm * norm
		}
		dnormMean /= float64(C)
		dnormNormMean /= float64(C)
		for i := range x {
			norm := (float64(x[i]) - m) * s
			dnorm := float64(weight[i]) * float64(d[i])
			dbias[i] += d[i]
			dweight[i] += float32(norm * float64(d[i]))
			di[i] += float32((dnorm - dnormMean - norm*dnormNormMean) * s)
		}
	}
}

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

func refAttentionForward(out, att, qkv []float32, B, T, C, NH int) {
	hs := C / NH
	scale := 1 / math.Sqrt(float64(hs))
	pre := make([]float64, T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				q := qkv[(b*T+t)*3*C+h*hs:][:hs]
				a := att[((b*NH+h)*T+t)*T:][:T]
				maxv := math.Inf(-1)
				for s := 0; s <= t; s++ {
					k := qkv[(b*T+s)*3*C+C+h*hs:][:hs]
					var dot float64
					for i := range q {
						dot += float64(q[i]) * float64(k[i])
					}
					pre[s] = dot * scale
					maxv = math.Max(maxv, pre[s])
				}
				var sum float64
				for s := 0; s <= t; s++ {
					pre[s] = math.Exp(pre[s] - maxv)
					sum += pre[s]
				}
				for s := 0; s < T; s++ {
					if s <= t {
						a[s] = float32(pre[s] / sum)
					} else {
						a[s] = 0
					}
				}
				o := out[(b*T+t)*C+h*hs:][:hs]
				for i := range o {
					var acc float64
					for s := 0; s <= t; s++ {
						acc += float64(a[s]) * float64(qkv[(b*T+s)*3*C+2*C+h*hs+i])
					}
					o[i] = float32(acc)
				}
			}
		}
	}
}

func refAttentionBackward(dqkv, dout, qkv, att []float32, B, T, C, NH int) {
	hs := C / NH
	scale := 1 / math.Sqrt(float64(hs))
	datt := make([]float64, T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				a := att[((b*NH+h)*T+t)*T:][:T]
				do := dout[(b*T+t)*C+h*hs:][:hs]
				// out_t = sum_s a[s] v_s
				for s := 0; s <= t; s++ {
					v := qkv[(b*T+s)*3*C+2*C+h*hs:][:hs]
					dv := dqkv[(b*T+s)*3*C+2*C+h*hs:][:hs]
					var d float64
					for i := range do {
						d += float64(do[i]) * float64(v[i])
						dv[i] += a[s] * do[i]
					}
					datt[s] = d
				}
				// softmax backward: dpre[s] = a[s] (datt[s] - sum_r a[r] datt[r])
				var dot float64
				for s := 0; s <= t; s++ {
					dot += float64(a[s]) * datt[s]
				}
				q := qkv[(b*T+t)*3*C+h*hs:][:hs]
				dq := dqkv[(b*T+t)*3*C+h*hs:][:hs]
				for s := 0; s <= t; s++ {
					dpre := float64(a[s]) * (datt[s] - dot) * scale
					k := qkv[(b*T+s)*3*C+C+h*hs:][:hs]
					dk := dqkv[(b*T+s)*3*C+C+h*hs:][:hs]
					for i := range q {
						dq[i] += float32(dpre * float64(k[i]))
						dk[i] += float32(dpre * float64(q[i]))
					}
				}
			}
		}
	}
}

func refAttentionDecode(out, cache, qkv []float32, B, maxT, pos, C, NH int) {
	hs := C / NH
	scale := 1 / math.Sqrt(float64(hs))
	for b := 0; b < B; b++ {
		row := cache[(b*maxT+pos)*2*C:][:2*C]
		copy(row, qkv[b*3*C+C:][:2*C])
		for h := 0; h < NH; h++ {
			q := qkv[b*3*C+h*hs:][:hs]
			pre := make([]float64, pos+1)
			maxv := math.Inf(-1)
			for s := 0; s <= pos; s++ {
				k := cache[(b*maxT+s)*2*C+h*hs:][:hs]
				var dot float64
				for i := range q {
					dot += float64(q[i]) * float64(k[i])
				}
				pre[s] = dot * scale
				maxv = math.Max(maxv, pre[s])
			}
			var sum float64
			for s := range pre {
				pre[s] = math.Exp(pre[s] - maxv)
				sum += pre[s]
			}
			o := out[b*C+h*hs:][:hs]
			for i := range o {
				var acc float64
				for s := 0; s <= pos; s++ {
					acc += pre[s] / sum * float64(cache[(b*maxT+s)*2*C+C+h*hs+i])
				}
				o[i] = float32(acc)
			}
		}
	}
}

const geluScale = 0.7978845608028654 // sqrt(2/pi)

func refGelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(geluScale*(x+0.044715*x*x*x)))
}

func refGeluGrad(x float64) float64 {
	u := geluScale * (x + 0.044715*x*x*x)
	th := math.Tanh(u)
	sech2 := 1 - th*th
	return 0.5*(1+th) + 0.5*x*sech2*geluScale*(1+3*0.044715*x*x)
}

func refGeluForward(out, inp []float32, N int) {
	for i := 0; i < N; i++ {
		out[i] = float32(refGelu(float64(inp[i])))
	}
}

func refGeluBackward(dinp, inp, dout []float32, N int) {
	for i := 0; i < N; i++ {
		dinp[i] += float32(refGeluGrad(float64(inp[i])) * float64(dout[i]))
	}
}

func refResidualForward(out, a, b []float32, N int) {
	for i := 0; i < N; i++ {
		out[i] = a[i] + b[i]
	}
}

func refResidualBackward(da, db, dout []float32, N int) {
	for i := 0; i < N; i++ {
		da[i] += dout[i]
		db[i] += dout[i]
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
