#!/usr/bin/env python3
"""How ask's semantic settings were chosen (eval/README.md, "WordLlama's vectors"): a numpy
replay of `search/semantic.rs` (tokens per whitespace word, stop words and special tokens
left out, catalogue IDF with the rare-row cap, a request's unknown token a share of the
heaviest) and of `Fusion` (z_BM25 + weight · z_cosine over all rows) over each request's
BM25 list as capdir itself ranks it, on the three development sets, for every combination
of SIF a, rare-row cap, unknown share and fusion weight; then, for each set, the setting
chosen on the other two (the one whose worse MRR@12 ratio to BM25 there is highest),
measured on it.

    python3 models/wordllama/choose.py WHEEL [CAPDIR]     # CAPDIR: target/release/capdir

WHEEL is the wheel make.py pins; needs numpy and tokenizers. It builds each set's catalogue
with CAPDIR and writes its BM25 lists (`capdir eval --lists`). The replay agrees with `capdir
eval` within 0.003 on the shipped setting (the floor of 0.1 on a cosine, which the replay
leaves out, is the difference).
"""
import itertools, json, os, sys, zipfile
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from make import VECTORS, TOKENIZER  # noqa: E402
from vectors import ROOT, SETS, development_sets, metrics, safetensor, standard  # noqa: E402

STOP = set("a an and are as at be but by for if in into is it no not of on or such that the "
           "their then there these they this to was will with".split())  # tantivy's English list
SIF = [None, 1e-4, 1e-5]
RARE = [2, 5, 10]
UNKNOWN = [0.1, 0.25, 0.5]
WEIGHT = [0.5, 0.7, 1.0, 1.2, 1.5, 2.0]


def ranked(scores, keys):
    """Each request's first 12 row keys by score, ties in row order."""
    return [[keys[j] for j in np.argsort(-row, kind="stable")[:12]] for row in scores]


def prepare(wheel, capdir=None):
    """The wheel's float vectors, and per development set its row keys, labels, BM25 matrix
    and the token ids of its rows and requests (as `search/semantic.rs` tokenises them).
    `capdir`: the binary that gives the BM25 matrices (default: the release build here)."""
    capdir = capdir or os.path.join(ROOT, "target/release/capdir")
    from tokenizers import Tokenizer
    with zipfile.ZipFile(wheel) as z:
        E0 = safetensor(z.read(VECTORS), "embedding.weight").astype(np.float64)
        whole = json.loads(z.read(TOKENIZER))
    tok = Tokenizer.from_str(json.dumps({k: whole[k] for k in ("version", "added_tokens", "normalizer", "model")}))
    ignored = np.zeros(len(E0), bool)
    for t, i in tok.get_vocab().items():
        special = t.startswith("<") and t.endswith(">")
        stop = t.startswith("\u2581") and t[1:].lower() in STOP | {""}
        ignored[i] = special or stop
    cache = {}

    def ids(text):
        out = []
        for w in text[:4096].split():
            if w not in cache:
                cache[w] = [i for i in tok.encode(w, add_special_tokens=False).ids if not ignored[i]]
            out += cache[w]
        return out

    data = {}
    for name, rows, asked, bm25 in development_sets(capdir):
        data[name] = dict(keys=[r["key"] for r in rows], labels=[set(a["keys"]) for a in asked], bm25=bm25,
                          rows=[ids(r["key"].replace("_", " ").lower() + ". " + r["what"]) for r in rows],
                          asked=[ids(a["query"]) for a in asked])
        data[name]["base"] = metrics(ranked(bm25, data[name]["keys"]), data[name]["labels"])
    return E0, data


def weights(E0, d, sif, rare, unknown):
    """The weighted vectors (SIF a `sif`, or none), and a set's row and request token
    weights: catalogue IDF with the rare-row cap, an unknown request token `unknown` of the
    heaviest."""
    p = 1 / np.arange(2, len(E0) + 2)
    E = E0 if sif is None else E0 * (sif / (sif + p / p.sum()))[:, None]
    df = np.zeros(len(E))
    for r in d["rows"]:
        df[list(set(r))] += 1
    n = sum(1 for r in d["rows"] if r)
    idf = np.maximum(np.log((n + 1) / (np.maximum(df, min(rare, n // 10)) + 0.5)), 0)
    return E, idf, np.where(df == 0, unknown * idf[df > 0].max(), idf)


def cosines(E0, d, sif, rare, unknown):
    """Each request's cosine to each row of set `d`: the weighted token vectors summed."""
    E, idf, qidf = weights(E0, d, sif, rare, unknown)

    def embed(ts, w):
        v = (w[ts][:, None] * E[ts]).sum(0) if ts else np.zeros(E.shape[1])
        norm = np.linalg.norm(v)
        return v / norm if norm > 1e-9 else v
    return np.array([embed(q, qidf) for q in d["asked"]]) @ np.array([embed(r, idf) for r in d["rows"]]).T


def main():
    E0, data = prepare(*sys.argv[1:3])
    results = {}
    for sif, rare, unknown in itertools.product(SIF, RARE, UNKNOWN):
        for name, d in data.items():
            cos = cosines(E0, d, sif, rare, unknown)
            for w in WEIGHT:
                results.setdefault((sif, rare, unknown, w), {})[name] = metrics(
                    ranked(standard(d["bm25"]) + w * standard(cos), d["keys"]), d["labels"])

    report(results, data, "SIF a, rare cap, unknown share, weight")


def report(results, data, setting):
    """The eight settings of `results` (setting → set → R@1, R@5, MRR@12) whose worst MRR@12
    ratio to BM25 over the three sets is highest; then, for each set, the setting chosen on
    the other two, measured on it."""
    def cell(m, name):
        return "%.3f / %.3f / %.3f (×%.3f)" % (*m, m[2] / data[name]["base"][2])
    names = [n for n, _ in SETS]
    print("BM25: " + "; ".join("%s %.3f / %.3f / %.3f" % (n, *data[n]["base"]) for n in names))
    print(f"\n| {setting} | " + " | ".join(names) + " |\n|---|---|---|---|")
    worst = lambda k, on: min(results[k][n][2] / data[n]["base"][2] for n in on)
    for k in sorted(results, key=lambda k: -worst(k, names))[:8]:
        print(f"| {k} | " + " | ".join(cell(results[k][n], n) for n in names) + " |")
    print("\n| held out | chosen on the other two | held-out R@1 / R@5 / MRR@12 |\n|---|---|---|")
    for held in names:
        k = max(results, key=lambda k: worst(k, [n for n in names if n != held]))
        print(f"| {held} | {k} | {cell(results[k][held], held)} |")


if __name__ == "__main__":
    main()
