#!/usr/bin/python3
"""Reference outputs for a model whose vocab_size is padded beyond its
tokenizer, as real checkpoints pad theirs (Qwen2.5: 151,936 rows for
151,665 tokens): the command-line tools must score and choose every row, as
transformers does, unless asked to keep to the tokenizer's ids.

The model is gen.py's plain-PyTorch Qwen2 (float64 from float32 weights)
with vocab_size 272 rows; its tokenizer is hftest's (256 bytes, 8 merges,
3 specials: 267 ids, <|im_end|> = 266 the EOS), which the Go test writes
next to a copy of this directory. The seed is the first one whose greedy
continuations (every row) choose a padding row (id >= 267) at least once,
whose greedy continuations over the tokenizer's ids differ from them, that
never choose a special token (264..266: they would stop generation), and
whose top-2 gaps stay above gen.MIN_GAP, so the test can fail either way.

Writes padded/qwen2/: config.json, model.safetensors,
reference.safetensors (logprobs [B, T-1], F32) and reference.json:
tokens, lengths, tokenizer_vocab, greedy (every row) and greedy_tokenizer
(argmax over ids below tokenizer_vocab), each a list of
{prompt, new_tokens, min_top2_gap}.

Run with Debian's torch: /usr/bin/python3 gen_padded.py
"""

import json
import os
import sys

import torch

import gen

TOKENIZER_VOCAB = 267  # hftest.Vocab
SPECIALS = (264, 265, 266)
NAME = os.path.join("padded", "qwen2")


def config():
    return gen.base("qwen2", vocab_size=272, use_sliding_window=False, max_window_layers=2,
                    bos_token_id=None, eos_token_id=266)


def greedy(c, P, prompt, limit):
    seq = list(prompt)
    gap = float("inf")
    for _ in range(gen.MAX_NEW):
        logits = gen.forward(c, P, torch.tensor([seq]))[0, -1][:limit]
        top = torch.topk(logits, 2).values
        gap = min(gap, float(top[0] - top[1]))
        seq.append(int(logits.argmax()))
    return seq[len(prompt):], gap


def attempt(seed):
    c = config()
    V = c["vocab_size"]
    gen_ = torch.Generator().manual_seed(seed)
    stored = gen.init_params(c, gen_)
    P = {n: t.to(torch.float64) for n, t in stored.items()}
    prompts = [torch.randint(0, TOKENIZER_VOCAB - len(SPECIALS), (n,), generator=gen_).tolist() for n in (3, 7, 12)]
    full = [greedy(c, P, p, V) for p in prompts]
    masked = [greedy(c, P, p, TOKENIZER_VOCAB) for p in prompts]
    new = [t for o, _ in full + masked for t in o]
    if any(t in SPECIALS for t in new):
        return None
    if not any(t >= TOKENIZER_VOCAB for o, _ in full for t in o):
        return None
    if min(g for _, g in full + masked) <= gen.MIN_GAP:
        return None
    # Two rows scored by logprobs; each holds padding ids in its second half.
    T = 16
    tokens = torch.randint(0, V, (2, T), generator=gen_)
    tokens[0, T - 3], tokens[1, T // 2 + 1], tokens[1, T - 1] = 268, 271, 267
    with torch.no_grad():
        logits = gen.forward(c, P, tokens)
    logp = logits[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return c, stored, prompts, full, masked, tokens, logp


def main():
    torch.set_num_threads(1)
    for seed in range(9000, 9500):
        got = attempt(seed)
        if got is not None:
            break
    else:
        sys.exit("no seed meets the conditions")
    c, stored, prompts, full, masked, tokens, logp = got
    d = os.path.join(gen.HERE, NAME)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    order = [n for n, _ in gen.expected_tensors(c)]
    gen.write_safetensors(os.path.join(d, "model.safetensors"), [(n, stored[n]) for n in order], {"format": "pt"})
    gen.write_safetensors(os.path.join(d, "reference.safetensors"), [("logprobs", logp.float())], {"format": "pt"})
    info = {
        "case": "qwen2 with vocab_size 272 over a 267-id tokenizer",
        "seed": seed,
        "tokenizer_vocab": TOKENIZER_VOCAB,
        "tokens": tokens.tolist(),
        "greedy": [{"prompt": p, "new_tokens": o, "min_top2_gap": g} for p, (o, g) in zip(prompts, full)],
        "greedy_tokenizer": [{"prompt": p, "new_tokens": o, "min_top2_gap": g} for p, (o, g) in zip(prompts, masked)],
        "max_new_tokens": gen.MAX_NEW,
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{NAME}: seed {seed}")


if __name__ == "__main__":
    main()
