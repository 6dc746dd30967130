// Package grpo is the math of Group Relative Policy Optimization (GRPO,
// DeepSeekMath, Shao et al. 2024, section "Group Relative Policy Optimization")
// and its Dr. GRPO variant (Liu et al. 2025, "Understanding R1-Zero-Like
// Training", the section introducing "Dr. GRPO: Group Relative Policy
// Optimization Done Right"),
// on plain data: rewards in, advantages out; per-token log-probabilities in,
// loss and d loss / d logp out.
//
// It has no model and no runtime in it: a policy computes its log-probs,
// calls Loss, and backpropagates the returned per-token gradients through its
// own network; the multi-agent algorithms (atgrpo, joyagents) call the
// advantage functions on their groups.
//
// # Advantages
//
// For a group of G rewards r_1..r_G sampled from the same prompt:
//
//	GRPO:     A_i = (r_i − mean(r)) / (std(r) + 1e-6)   std unbiased (divide by G−1)
//	Dr. GRPO: A_i =  r_i − mean(r)
//
// A group of one has no baseline to compare with: its advantage is 0.
//
// # Clipped token-level objective
//
// For token t of completion i with current log-prob ℓ, behaviour (old)
// log-prob ℓ_old, ratio ρ = exp(ℓ − ℓ_old) and advantage A:
//
//	loss_pg = −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A)          ε = 0.2 by default
//
// and, when a frozen reference policy's log-prob ℓ_ref is given, the k3 KL
// estimator (Schulman, "Approximating KL Divergence") with δ = ℓ_ref − ℓ:
//
//	kl = exp(δ) − δ − 1 ≥ 0,    loss = loss_pg + β·kl
//
// Gradients with respect to ℓ (what a policy backpropagates):
//
//	d loss_pg / dℓ = −A·ρ  when the unclipped branch is the active one of the min,
//	               = 0     when the clipped branch is (the clip is constant in ℓ).
//
// With A > 0, min(ρA, clip(ρ)A) = A·min(ρ, clip(ρ)): the clipped branch wins
// strictly only when ρ > 1+ε. With A < 0 the min flips to A·max(ρ, clip(ρ)):
// the clipped branch wins strictly only when ρ < 1−ε. At ρ = 1±ε both branches
// are equal and both have slope −A·ρ (clip passes its gradient at the closed
// boundary), so the gradient there is −A·ρ; with A = 0 it is 0. Such tokens
// count toward the clip fraction only when the clip strictly bites.
//
//	d kl / dℓ = 1 − exp(δ)
//
// # Aggregation
//
// Per-token losses ℓ_{i,t} over a batch of B non-empty completions of lengths
// |o_i| are combined as (weights w_{i,t} also scale the gradients):
//
//	TokenMean    Σ_i Σ_t ℓ_{i,t} / Σ_i |o_i|          (DAPO's token-level mean)
//	SeqMean      (1/B) Σ_i (1/|o_i|) Σ_t ℓ_{i,t}       (the original GRPO)
//	ConstantNorm (1/B) Σ_i Σ_t ℓ_{i,t} / C             (Dr. GRPO: C a constant, e.g. the generation budget)
//
// # Statistics
//
// Loss reports the clip fraction (share of tokens whose gradient the clip
// zeroes), the mean k3 KL, an entropy estimate −mean(ℓ) over the sampled
// tokens (a Monte Carlo estimate of the per-token entropy, since
// E_{x∼π}[−log π(x)] = H(π) when the tokens are on-policy), the mean ratio, and
// the advantages' mean, std, min, max and spread (max − min).
package grpo
