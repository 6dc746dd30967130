#!/usr/bin/python3
"""Reference outputs for LoRA adapters on the Llama/Qwen family.

For a few of gen.py's cases it draws a LoRA adapter (A as PEFT initialises
it, kaiming-uniform U(-1/sqrt(in), 1/sqrt(in)); B random and non-zero, so
the adapter changes the outputs) and computes, with gen.py's plain float64
model and the adapter term scaling * (x @ A.T) @ B.T added to each target
projection, the next-token log-probs of a ragged batch, the gradient of
L = -sum w * logp with respect to every lora_A and lora_B (the base is not
differentiated), and greedy continuations. The adapter is written in PEFT's
layout: adapter_config.json and adapter_model.safetensors with PEFT's tensor
names, which PeftModel.from_pretrained opens.

Run with Debian's torch after gen.py (it reads gen.py's model files):
/usr/bin/python3 gen_lora.py (or `make testdata-llama`).

Per case lora/<case>/:
  adapter_config.json, adapter_model.safetensors (F32)
  reference.safetensors (F32): logprobs [B, T-1], weights [B, T-1],
    grad.<PEFT tensor name> for every lora_A / lora_B
  reference.json: base case, tokens, lengths, loss, greedy continuations.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch

import gen

HERE = os.path.dirname(os.path.abspath(__file__))

PATHS = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "down_proj": "mlp.down_proj",
}
ALL = list(PATHS)

# name, base case, targets, r, lora_alpha, use_rslora
CASES = [
    ("llama_gqa_all", "llama_gqa", ALL, 4, 8, False),
    ("qwen3_qknorm_qv_rslora", "qwen3_qknorm", ["q_proj", "v_proj"], 8, 16, True),
    ("qwen2_tied_bias", "qwen2_tied", ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"], 4, 6, False),
]


def read_safetensors(path):
    """name -> float32 tensor (F32 files only, as gen.py writes these cases)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (path, name, h["dtype"])
        b, e = h["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy()).reshape(h["shape"])
    return out


def dims(c, target):
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}[target]


def peft_key(layer, target, ab):
    return f"base_model.model.model.layers.{layer}.{PATHS[target]}.lora_{ab}.weight"


def peft_config(base, targets, r, alpha, rslora):
    """adapter_config.json as PEFT's save_pretrained writes it."""
    return {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
        "layers_pattern": None, "layers_to_transform": None, "lora_alpha": alpha, "lora_dropout": 0.0,
        "modules_to_save": None, "peft_type": "LORA", "r": r, "rank_pattern": {}, "revision": None,
        "target_modules": targets, "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": rslora,
    }


def write_case(name, base, targets, r, alpha, rslora, seed):
    bdir = os.path.join(HERE, base)
    with open(os.path.join(bdir, "config.json")) as f:
        c = json.load(f)
    P = {n: t.double() for n, t in read_safetensors(os.path.join(bdir, "model.safetensors")).items()}
    s = alpha / math.sqrt(r) if rslora else alpha / r

    gen_ = torch.Generator().manual_seed(seed)
    stored, lora, leaves = [], {}, {}
    for layer in range(c["num_hidden_layers"]):
        for t in ALL:  # PEFT's order does not matter; this is the Go layout's
            if t not in targets:
                continue
            fin, fout = dims(c, t)
            bound = 1 / math.sqrt(fin)
            A = ((torch.rand(r, fin, generator=gen_, dtype=torch.float64) * 2 - 1) * bound).float()
            B = (torch.randn(fout, r, generator=gen_, dtype=torch.float64) * (0.5 / (s * math.sqrt(r)))).float()
            stored += [(peft_key(layer, t, "A"), A), (peft_key(layer, t, "B"), B)]
            A64, B64 = A.double().requires_grad_(True), B.double().requires_grad_(True)
            leaves[peft_key(layer, t, "A")], leaves[peft_key(layer, t, "B")] = A64, B64
            lora[f"model.layers.{layer}.{PATHS[t]}"] = (A64, B64, s)

    V, T = c["vocab_size"], 20
    lengths = [T, T - 6, T - 11]
    Bn = len(lengths)
    tokens = torch.randint(0, V, (Bn, T), generator=gen_)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    w = torch.rand(Bn, T - 1, generator=gen_, dtype=torch.float64).float().double()
    for b, n in enumerate(lengths):
        w[b, n - 1:] = 0

    logits = gen.forward(c, P, tokens, lora)
    logp = logits[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    valid = torch.zeros(Bn, T - 1, dtype=torch.bool)
    for b, n in enumerate(lengths):
        valid[b, : n - 1] = True
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    loss = -(w * logp).sum()
    loss.backward()
    for n, t in P.items():
        assert t.grad is None, n  # the base is not differentiated

    # the adapter must matter: compare with the bare base
    with torch.no_grad():
        lp0 = gen.forward(c, P, tokens)[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
        shift = float((torch.where(valid, lp0, torch.zeros_like(lp0)) - logp).abs().max())
    assert shift > 0.05, (name, shift)

    prompts = [torch.randint(0, V, (n,), generator=gen_).tolist() for n in (3, 7, 12)]
    with torch.no_grad():
        L0 = {k: (a.detach(), b.detach(), sc) for k, (a, b, sc) in lora.items()}
        outs = [gen.greedy(c, P, p, L0) for p in prompts]
    min_gap = min(g for _, g in outs)
    if min_gap <= gen.MIN_GAP:
        return None

    d = os.path.join(HERE, "lora", name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(peft_config(base, targets, r, alpha, rslora), f, indent=2, sort_keys=True)
        f.write("\n")
    gen.write_safetensors(os.path.join(d, "adapter_model.safetensors"), stored, {"format": "pt"})
    ref = [("logprobs", logp.detach().float()), ("weights", w.float())]
    for k, _ in stored:
        ref.append(("grad." + k, leaves[k].grad.float()))
    gen.write_safetensors(os.path.join(d, "reference.safetensors"), ref, {"format": "pt"})
    info = {
        "case": name, "base": base, "seed": seed, "scaling": s, "shift_from_base": shift,
        "tokens": tokens.tolist(), "lengths": lengths, "loss": float(loss),
        "loss_definition": "L = -sum_{b, t < lengths[b]-1} weights[b,t] * logprobs[b,t]",
        "greedy": [{"prompt": p, "new_tokens": o, "min_top2_gap": g} for p, (o, g) in zip(prompts, outs)],
        "max_new_tokens": gen.MAX_NEW, "min_top2_gap": min_gap,
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    return min_gap


def main():
    torch.set_num_threads(1)
    only = set(sys.argv[1:])
    for i, (name, base, targets, r, alpha, rslora) in enumerate(CASES):
        if only and name not in only:
            continue
        for attempt in range(50):
            seed = 5000 + 100 * i + attempt
            gap = write_case(name, base, targets, r, alpha, rslora, seed)
            if gap is not None:
                print(f"{name}: seed {seed}, min top-2 gap {gap:.4f}")
                break
        else:
            sys.exit(f"{name}: no seed without greedy near-ties")


if __name__ == "__main__":
    main()
