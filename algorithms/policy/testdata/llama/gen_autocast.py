#!/usr/bin/python3
"""PyTorch's own error under BF16 autocast, the yardstick for troupe's mixed
precision (Llama.SetComputeDType(BF16), TestLlamaMixedPrecision).

For some of gen.py's float32 cases it runs gen.py's model in float32 under
torch.autocast("cpu", dtype=torch.bfloat16), the way a PyTorch user trains
in mixed precision on a CPU, and in plain float32, computes the next-token
log-probs and the gradient of gen.py's loss L = -sum w * logp, and writes how
far each lands from gen.py's float64 reference (reference.safetensors):

  logprob_max_abs  largest |logp - reference| over the real positions
  grad_max_rel     largest |g - reference| / max |reference| over the
                   elements of a tensor, worst tensor

into autocast.json. The Go test holds troupe's BF16 compute to a small
multiple of PyTorch's autocast error, and its float32 to the float32 one.

Run with Debian's torch after gen.py: /usr/bin/python3 gen_autocast.py
(or `make testdata-llama`).
"""

import json
import os

import torch

import gen
from gen_lora import read_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["llama_gqa", "llama_mqa_tied_bias", "qwen2_tied", "qwen3_qknorm", "llama3_rope"]


def errors(c, P, ref_info, ref, autocast):
    tokens = torch.tensor(ref_info["tokens"])
    lengths = ref_info["lengths"]
    B, T = tokens.shape
    w = ref["weights"].double()
    for p in P.values():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = gen.forward(c, P, tokens)
    logp = logits.float()[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    valid = torch.zeros(B, T - 1, dtype=torch.bool)
    for b, n in enumerate(lengths):
        valid[b, : n - 1] = True
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    loss = -(w * logp.double()).sum()
    loss.backward()
    lp_err = float((logp.detach() - ref["logprobs"]).abs().max())
    g_err = 0.0
    for n, p in P.items():
        r = ref["grad." + n]
        g_err = max(g_err, float((p.grad.float() - r).abs().max() / r.abs().max()))
    return {"logprob_max_abs": lp_err, "grad_max_rel": g_err}


def main():
    out = {}
    for name in CASES:
        d = os.path.join(HERE, name)
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        with open(os.path.join(d, "reference.json")) as f:
            info = json.load(f)
        ref = read_safetensors(os.path.join(d, "reference.safetensors"))
        P = {n: t.requires_grad_(True) for n, t in read_safetensors(os.path.join(d, "model.safetensors")).items()}
        out[name] = {
            "torch_float32": errors(c, P, info, ref, False),
            "torch_autocast_bf16": errors(c, P, info, ref, True),
        }
        print(name, out[name])
    out["about"] = ("PyTorch " + torch.__version__ + " on gen.py's float32 cases: largest errors against the "
                    "float64 reference, plain float32 and under torch.autocast('cpu', dtype=torch.bfloat16)")
    with open(os.path.join(HERE, "autocast.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
