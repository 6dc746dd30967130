#!/usr/bin/python3
"""Reference for the Go tokenizer: byte-level BPE written plainly in Python.

Run with /usr/bin/python3 (needs Debian's python3-regex, which has the \\p
classes and lookahead of the pre-tokenizer patterns):

    cd algorithms/policy/tokenizer/testdata && /usr/bin/python3 gen.py

For each of three styles (GPT-2, Qwen2, Llama 3) it trains a small BPE
vocabulary (a few hundred merges) on the corpus below, writes a
tokenizer.json in that model's layout into testdata/<style>/, and writes
expected.json: the ids this reference gives for a set of tricky strings,
without and with the post-processor's special tokens. The Go tests compare
exactly. Nothing here is shared with the Go code: the regex engine is the
`regex` module, the merge loop is GPT-2's original one (merge the
lowest-ranked pair everywhere, repeat), and added tokens are found by a
plain scan.
"""

import json
import os
import unicodedata

import regex

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

CORPUS = """
The quick brown fox jumps over the lazy dog. It's a classic sentence; we'll use it
again and again, because it's got every letter. Don't you think they've seen it before?
I'm sure you'd agree that there's nothing wrong with repetition, repetition, repetition.
Tokenization is the process of splitting text into tokens. A tokenizer maps text to
numbers, and numbers back to text: 1, 2, 3, 10, 100, 1000, 2024, 3.14159, 42, 7 days.
def tokenize(text):
    return [token for token in text.split() if token]  # comment

for i in range(10):
    print(i, i * i)
if (a && b) { return x; } else { return y; }
<html><body><p>Hello, world!</p></body></html>
https://example.com/path?q=1&r=two#frag
Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe se\u00f1or fa\u00e7ade co\u00f6perate
\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u6211\u4eec\u559c\u6b22\u5b66\u4e60\u3002\u4f60\u597d\u4f60\u597d
\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8
\U0001F600\U0001F603\U0001F604 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EF\U0001F1F5
The user said: "hello there" and the assistant replied: 'hi!' -- then they talked...
Numbers like 12345 and 678 and 9 and 00 and 31415926535 appear here and there.
    indented line
\t\ttabbed line
trailing spaces   
the the the the of of of and and and to to to in in in is is is that that that
"""

TESTS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How's it going? I'm fine; we'll see, they've done it, you're right, I'd say.",
    "DON'T YOU'LL I'M SHE'S WE'VE THEY'RE HE'D",
    "'s 't 'S 'ſ 'll 'LL 'Ll x'd",
    "a  b   c",
    "  leading",
    "trailing  ",
    "tabs\tand\t\tmore",
    "line1\nline2\n\nline3",
    "\r\n windows\r\n",
    "   \n  \n x",
    "\n",
    "x \n\n\t y",
    "end with newlines\n\n",
    "\u00a0nbsp\u3000ideographic space\u2003em",
    "1234567890",
    "3.14159 and 2,718",
    "x1y22z333w4444v55555",
    "\u0663\u0664\u0665 arabic digits",
    "\u216b roman \u00b2 \u00bd",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9",
    "e\u0301 combining e\u0301x",
    "\u00dcn\u00efc\u00f6d\u00e9",
    "\ufb01 ligature",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\U0001F44D\U0001F3FD family: \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 flags \U0001F1EF\U0001F1F5",
    "\U0001F600\U0001F603\U0001F604",
    "def f(x):\n    return x**2  # comment\n",
    "if (a && b) { return; }",
    "<html><body>hi</body></html>",
    "https://example.com/path?q=1&r=two#frag",
    "!!!???... --- ===",
    "a.b.c 'quoted' \"double\"",
    "supercalifragilisticexpialidocious " * 3,
    "abcdefghij" * 20,
    "tokenization tokenizer tokens",
    " the the the of and",
    "<|endoftext|>",
    "a<|endoftext|>b",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nok\n</think>\n\nanswer",
    " <mask> x",
    "x   <mask>",
    "hello<sw>world <sw> x <sw>",
    "<|begin_of_text|>hi<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>",
    "<|im_sta partial <|im_end",
    "<<|im_end|>>",
    "e\u0301x and \u00e9x",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, {b: chr(c) for b, c in zip(bs, cs)}


BYTE_ORDER, B2U = bytes_to_unicode()
U2B = {c: b for b, c in B2U.items()}


def to_unicode(s):
    return "".join(B2U[b] for b in s.encode("utf-8"))


def train(words, n_merges):
    """Classic BPE training: merge the most frequent pair (ties: smallest)."""
    counts = {}
    for w in words:
        counts[tuple(w)] = counts.get(tuple(w), 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new = {}
        for w, c in counts.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        counts = new
    return merges


def bpe(word, ranks):
    """GPT-2's encoder.py loop."""
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        r, _ = min(pairs)
        if r == 1 << 30:
            break
        a, b = min((p for p in zip(parts, parts[1:])), key=lambda p: ranks.get(p, 1 << 30))
        out = []
        i = 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(parts[i])
                i += 1
        parts = out
    return parts


def is_word_char(c):
    return regex.match(r"\w", c) is not None


def find_added(text, tokens):
    """Leftmost-longest scan for added tokens, with single_word, lstrip and
    rstrip as tokenizers' AddedVocabulary::find_matches has them. Returns
    [(segment, token-or-None)]."""
    out = []
    start_off = 0
    i = 0
    while i < len(text):
        best = None
        for t in tokens:
            if text.startswith(t["key"], i) and (best is None or len(t["key"]) > len(best["key"])):
                best = t
        if best is None:
            i += 1
            continue
        start, stop = i, i + len(best["key"])
        i = stop
        if best["single_word"]:
            if (start > 0 and is_word_char(text[start - 1])) or (stop < len(text) and is_word_char(text[stop])):
                continue
        if best["lstrip"]:
            s = start
            while s > 0 and regex.match(r"\s", text[s - 1]):
                s -= 1
            start = max(s, start_off)
        if best["rstrip"]:
            while stop < len(text) and regex.match(r"\s", text[stop]):
                stop += 1
        if start_off < start:
            out.append((text[start_off:start], None))
        out.append((text[start:stop], best))
        start_off = stop
        i = max(i, stop)
    if start_off < len(text):
        out.append((text[start_off:], None))
    return out


class Style:
    def __init__(self, name, pat, specials, nfc=False, bos=None, ignore_merges=False, extra_vocab=()):
        self.name, self.pat, self.nfc, self.bos = name, regex.compile(pat), nfc, bos
        self.pat_src = pat
        self.specials, self.ignore_merges, self.extra_vocab = specials, ignore_merges, extra_vocab

    def pretokenize(self, text):
        return self.pat.findall(text)

    def build(self, n_merges):
        text = unicodedata.normalize("NFC", CORPUS) if self.nfc else CORPUS
        words = [to_unicode(w) for w in self.pretokenize(text)]
        self.merges = train(words, n_merges)
        self.ranks = {m: i for i, m in enumerate(self.merges)}
        vocab = {}
        for b in BYTE_ORDER:
            vocab[B2U[b]] = len(vocab)
        for a, b in self.merges:
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
        for w in self.extra_vocab:
            u = to_unicode(w)
            if u not in vocab:
                vocab[u] = len(vocab)
        self.vocab = vocab
        self.added = []
        for sp in self.specials:
            t = dict(sp)
            t["id"] = len(vocab) + len(self.added)
            t["key"] = unicodedata.normalize("NFC", t["content"]) if (t["normalized"] and self.nfc) else t["content"]
            self.added.append(t)

    def encode(self, text, add_special):
        ids = []
        raw_tokens = [t for t in self.added if not t["normalized"]]
        norm_tokens = [t for t in self.added if t["normalized"]]
        for seg, tok in find_added(text, raw_tokens):
            if tok is not None:
                ids.append(tok["id"])
                continue
            if self.nfc:
                seg = unicodedata.normalize("NFC", seg)
            for sub, tok2 in find_added(seg, norm_tokens):
                if tok2 is not None:
                    ids.append(tok2["id"])
                    continue
                for w in self.pretokenize(sub):
                    u = to_unicode(w)
                    if self.ignore_merges and u in self.vocab:
                        ids.append(self.vocab[u])
                        continue
                    ids.extend(self.vocab[p] for p in bpe(u, self.ranks))
        if add_special and self.bos is not None:
            ids = [self.added_id(self.bos)] + ids
        return ids

    def added_id(self, content):
        return next(t["id"] for t in self.added if t["content"] == content)

    def decode(self, ids, skip_special):
        inv = {i: t for t, i in self.vocab.items()}
        by_id = {t["id"]: t for t in self.added}
        out = bytearray()
        for i in ids:
            if i in by_id:
                if skip_special and by_id[i]["special"]:
                    continue
                # tokenizers sends added tokens through the ByteLevel
                # decoder too: characters of the byte map become their
                # bytes (so a non-ASCII token such as "\u00e9x" decodes to
                # b"\xe9x"); a token with any other character stays UTF-8.
                key = by_id[i]["key"]
                if all(c in U2B for c in key):
                    out += bytes(U2B[c] for c in key)
                else:
                    out += key.encode("utf-8")
            else:
                out += bytes(U2B[c] for c in inv[i])
        return bytes(out)

    def tokenizer_json(self):
        if self.name == "gpt2":
            pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
            post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
            merges = [a + " " + b for a, b in self.merges]  # the old string form
        else:
            pre = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": self.pat_src}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
            post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
            merges = [[a, b] for a, b in self.merges]  # the newer pair form
        if self.bos is not None:
            bos_id = self.added_id(self.bos)
            post = {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": self.bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": {"id": self.bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                          {"SpecialToken": {"id": self.bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {self.bos: {"id": self.bos, "ids": [bos_id], "tokens": [self.bos]}}}]}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": t["id"], "content": t["content"], "single_word": t["single_word"],
                              "lstrip": t["lstrip"], "rstrip": t["rstrip"], "normalized": t["normalized"],
                              "special": t["special"]} for t in self.added],
            "normalizer": {"type": "NFC"} if self.nfc else None,
            "pre_tokenizer": pre,
            "post_processor": post,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": self.ignore_merges, "vocab": self.vocab, "merges": merges},
        }


def tok(content, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False):
    return dict(content=content, special=special, normalized=normalized, single_word=single_word,
                lstrip=lstrip, rstrip=rstrip)


STYLES = [
    Style("gpt2", GPT2_PAT, [tok("<|endoftext|>"), tok("<mask>", lstrip=True), tok("<sw>", special=False, single_word=True)]),
    Style("qwen2", QWEN2_PAT, [tok("<|endoftext|>"), tok("<|im_start|>"), tok("<|im_end|>"),
                               tok("<think>", special=False), tok("</think>", special=False),
                               tok("e\u0301x", special=False, normalized=True)], nfc=True),
    Style("llama3", LLAMA3_PAT, [tok("<|begin_of_text|>"), tok("<|end_of_text|>"), tok("<|start_header_id|>"),
                                 tok("<|end_header_id|>"), tok("<|eot_id|>"), tok("<mask>", rstrip=True)],
          bos="<|begin_of_text|>", ignore_merges=True,
          extra_vocab=(" tokenization", " tokenizer", "supercalifragilisticexpialidocious", " supercalifragilisticexpialidocious")),
]

CONFIGS = {
    "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
             "tokenizer_class": "GPT2Tokenizer"},
    "qwen2": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": {"__type": "AddedToken", "content": "<|eot_id|>"},
               "tokenizer_class": "PreTrainedTokenizerFast"},
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for st in STYLES:
        st.build(400)
        d = os.path.join(here, st.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(st.tokenizer_json(), f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(CONFIGS[st.name], f, ensure_ascii=False, indent=1)
        cases = []
        for t in TESTS:
            ids = st.encode(t, False)
            # Decoding gives the text back, normalized, unless an lstrip or
            # rstrip token swallowed whitespace.
            want = unicodedata.normalize("NFC", t) if st.nfc else t
            roundtrip = st.decode(ids, False) == want.encode("utf-8")
            assert roundtrip or "<mask>" in t or "\u00e9x" in want, (st.name, t)
            cases.append({"text": t, "ids": ids, "ids_special": st.encode(t, True),
                          "decoded_hex": st.decode(ids, False).hex(),
                          "decoded_skip_special_hex": st.decode(ids, True).hex()})
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
        print(st.name, len(st.vocab), "vocab", len(st.merges), "merges", len(TESTS), "cases")


if __name__ == "__main__":
    main()
