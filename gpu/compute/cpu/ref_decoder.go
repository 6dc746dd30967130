package cpu

import "math"

// Reference kernels of the Llama/Qwen decoder ops: single-threaded, float64
// accumulation, written to match the formulas of compute.Backend's doc
// comments line by line. The fast kernels (fast_decoder.go) are tested
// against these.

func refEmbedForward(out []float32, inp []int32, wte []float32, N, C int) {
	for n := 0; n < N; n++ {
		copy(out[n*C:][:C], wte[int(inp[n])*C:][:C])
	}
}

func refEmbedBackward(dwte, dout []float32, inp []int32, N, C int) {
	for n := 0; n < N; n++ {
		d := dout[n*C:][:C]
		w := dwte[int(inp[n])*C:][:C]
		for i := range d {
			w[i] += d[i]
		}
	}
}

func refRMSNormForward(out, rstd, inp, weight []float32, N, C int, eps float32) {
	for n := 0; n < N; n++ {
		x := inp[n*C:][:C]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ss/float64(C)+float64(eps))
		o := out[n*C:][:C]
		for i, v := range x {
			o[i] = float32(float64(v) * r * float64(weight[i]))
		}
		rstd[n] = float32(r)
	}
}

// refRMSNormBackward: with y_i = x_i·r·w_i and r = (mean(x²)+eps)^-½,
// dr/dx_j = -r³·x_j/C, so dx_j = r·w_j·g_j - r³·x_j/C · Σ_i g_i·w_i·x_i.
func refRMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, N, C int) {
	for n := 0; n < N; n++ {
		x, g, di := inp[n*C:][:C], dout[n*C:][:C], dinp[n*C:][:C]
		r := float64(rstd[n])
		var dot float64
		for i := range x {
			dot += float64(g[i]) * float64(weight[i]) * float64(x[i])
		}
		k := r * r * r * dot / float64(C)
		for i := range x {
			di[i] += float32(r*float64(weight[i])*float64(g[i]) - k*float64(x[i]))
			if dweight != nil {
				dweight[i] += float32(float64(g[i]) * float64(x[i]) * r)
			}
		}
	}
}

// refRope rotates every head of x (N,H,HD) by its row's position; sign -1
// applies the inverse rotation (the backward).
func refRope(x []float32, pos []int32, cos, sin []float32, N, H, HD int, sign float64) {
	half := HD / 2
	for n := 0; n < N; n++ {
		c := cos[int(pos[n])*half:][:half]
		s := sin[int(pos[n])*half:][:half]
		for h := 0; h < H; h++ {
			v := x[(n*H+h)*HD:][:HD]
			for i := 0; i < half; i++ {
				a, b := float64(v[i]), float64(v[i+half])
				cc, ss := float64(c[i]), sign*float64(s[i])
				v[i] = float32(a*cc - b*ss)
				v[i+half] = float32(b*cc + a*ss)
			}
		}
	}
}

// refGQAttentionForward: query head h reads key/value head h/(NH/KVH).
func refGQAttentionForward(out, att, q, k, v []float32, B, T, NH, KVH, HD int, scale float32) {
	group := NH / KVH
	qs, ks := NH*HD, KVH*HD // row strides
	sc := float64(scale)
	p := make([]float64, T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			g := h / group
			for t := 0; t < T; t++ {
				qt := q[(b*T+t)*qs+h*HD:][:HD]
				maxv := math.Inf(-1)
				for s := 0; s <= t; s++ {
					kr := k[(b*T+s)*ks+g*HD:][:HD]
					var dot float64
					for i := range qt {
						dot += float64(qt[i]) * float64(kr[i])
					}
					p[s] = dot * sc
					maxv = math.Max(maxv, p[s])
				}
				var sum float64
				for s := 0; s <= t; s++ {
					p[s] = math.Exp(p[s] - maxv)
					sum += p[s]
				}
				a := att[((b*NH+h)*T+t)*T:][:T]
				for s := range a {
					if s <= t {
						p[s] /= sum
						a[s] = float32(p[s])
					} else {
						a[s] = 0
					}
				}
				o := out[(b*T+t)*qs+h*HD:][:HD]
				for i := range o {
					var acc float64
					for s := 0; s <= t; s++ {
						acc += p[s] * float64(v[(b*T+s)*ks+g*HD+i])
					}
					o[i] = float32(acc)
				}
			}
		}
	}
}

// refGQAttentionBackward accumulates each gradient in float64 over the whole
// sequence (and, for dk and dv, over the query heads sharing the key/value
// head), adding it to the float32 gradient once.
func refGQAttentionBackward(dq, dk, dv, dout, q, k, v, att []float32, B, T, NH, KVH, HD int, scale float32) {
	group := NH / KVH
	qs, ks := NH*HD, KVH*HD
	sc := float64(scale)
	datt := make([]float64, T)
	dq64 := make([]float64, T*HD)
	dk64, dv64 := make([]float64, T*HD), make([]float64, T*HD)
	for b := 0; b < B; b++ {
		for g := 0; g < KVH; g++ {
			clear(dk64)
			clear(dv64)
			for h := g * group; h < (g+1)*group; h++ {
				clear(dq64)
				for t := 0; t < T; t++ {
					a := att[((b*NH+h)*T+t)*T:][:T]
					do := dout[(b*T+t)*qs+h*HD:][:HD]
					// out_t = Σ_s a[s]·v_s
					for s := 0; s <= t; s++ {
						vs := v[(b*T+s)*ks+g*HD:][:HD]
						var d float64
						for i := range do {
							d += float64(do[i]) * float64(vs[i])
							dv64[s*HD+i] += float64(a[s]) * float64(do[i])
						}
						datt[s] = d
					}
					// softmax: dpre[s] = a[s]·(datt[s] - Σ_r a[r]·datt[r])
					var dot float64
					for s := 0; s <= t; s++ {
						dot += float64(a[s]) * datt[s]
					}
					qt := q[(b*T+t)*qs+h*HD:][:HD]
					for s := 0; s <= t; s++ {
						dpre := float64(a[s]) * (datt[s] - dot) * sc
						kk := k[(b*T+s)*ks+g*HD:][:HD]
						for i := range qt {
							dq64[t*HD+i] += dpre * float64(kk[i])
							dk64[s*HD+i] += dpre * float64(qt[i])
						}
					}
				}
				for t := 0; t < T; t++ {
					d := dq[(b*T+t)*qs+h*HD:][:HD]
					for i := range d {
						d[i] += float32(dq64[t*HD+i])
					}
				}
			}
			for s := 0; s < T; s++ {
				dks, dvs := dk[(b*T+s)*ks+g*HD:][:HD], dv[(b*T+s)*ks+g*HD:][:HD]
				for i := range dks {
					dks[i] += float32(dk64[s*HD+i])
					dvs[i] += float32(dv64[s*HD+i])
				}
			}
		}
	}
}

// refGQAttentionDecode: cache (B,maxT,2,KVH,HD).
func refGQAttentionDecode(out, cache, q, k, v []float32, pos []int32, B, maxT, NH, KVH, HD int, scale float32) {
	group := NH / KVH
	kd := KVH * HD
	for b := 0; b < B; b++ {
		p := int(pos[b])
		copy(cache[((b*maxT+p)*2)*kd:][:kd], k[b*kd:][:kd])
		copy(cache[((b*maxT+p)*2+1)*kd:][:kd], v[b*kd:][:kd])
	}
	sc := float64(scale)
	for b := 0; b < B; b++ {
		p := int(pos[b])
		w := make([]float64, p+1)
		for h := 0; h < NH; h++ {
			g := h / group
			qh := q[(b*NH+h)*HD:][:HD]
			maxv := math.Inf(-1)
			for s := 0; s <= p; s++ {
				ks := cache[((b*maxT+s)*2)*kd+g*HD:][:HD]
				var dot float64
				for i := range qh {
					dot += float64(qh[i]) * float64(ks[i])
				}
				w[s] = dot * sc
				maxv = math.Max(maxv, w[s])
			}
			var sum float64
			for s := range w {
				w[s] = math.Exp(w[s] - maxv)
				sum += w[s]
			}
			o := out[(b*NH+h)*HD:][:HD]
			for i := range o {
				var acc float64
				for s := 0; s <= p; s++ {
					acc += w[s] * float64(cache[((b*maxT+s)*2+1)*kd+g*HD+i])
				}
				o[i] = float32(acc / sum)
			}
		}
	}
}

func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func refSwiGLUForward(out, gate, up []float32, N int) {
	for i := 0; i < N; i++ {
		g := float64(gate[i])
		out[i] = float32(g * refSigmoid(g) * float64(up[i]))
	}
}

// refSwiGLUBackward: silu'(g) = σ(g)·(1 + g·(1-σ(g))).
func refSwiGLUBackward(dgate, dup, dout, gate, up []float32, N int) {
	for i := 0; i < N; i++ {
		g, d := float64(gate[i]), float64(dout[i])
		s := refSigmoid(g)
		dgate[i] += float32(d * float64(up[i]) * s * (1 + g*(1-s)))
		dup[i] += float32(d * g * s)
	}
}
