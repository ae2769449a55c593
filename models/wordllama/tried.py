#!/usr/bin/env python3
"""Three rankings measured beside what ships and not shipped (eval/README.md, "Also tried,
with WordLlama's vectors"): the numpy replay of choose.py at the shipped setting (SIF a 1e-5,
rare-row cap 5, unknown share 0.5), with a third list or a weight per request added to
z_BM25 + weight · z_cosine, each chosen across sets as choose.py chooses:

  maxsim    each request token's best cosine to any token of the row (whole WordLlama
            vectors, no SIF), weighted by its IDF, tokens under a floor counting nothing;
  adaptive  the semantic weight per request, from the gap between the first two standard
            scores of each list (w · exp(b · gap_cos − a · gap_bm25)), or from how many of
            the two lists' first ten rows agree;
  subword   Okapi BM25 over the BPE tokens the vectors use (catches "segment" in
            "segmentation" where the stemmer does not).

    python3 models/wordllama/tried.py WHEEL [CAPDIR]     # as choose.py
"""
import collections, itertools, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from choose import cosines, prepare, ranked, report, weights  # noqa: E402
from vectors import metrics, standard  # noqa: E402

SHIPPED = (1e-5, 5, 0.5)
WEIGHT = [0.7, 1.0, 1.2]


def maxsim(E0, d, floors):
    """Per floor, a requests × rows matrix: the IDF-weighted mean over a request's tokens of
    its best cosine to a row's tokens (0 under the floor)."""
    _, _, qidf = weights(E0, d, *SHIPPED)
    unit = E0 / np.maximum(np.linalg.norm(E0, axis=1, keepdims=True), 1e-9)
    # Every token any row has, once; each row as its columns among them.
    known = np.array(sorted({t for r in d["rows"] for t in r}), int)
    rows = [np.searchsorted(known, sorted(set(r))) for r in d["rows"]]
    out = {f: np.zeros((len(d["asked"]), len(rows))) for f in floors}
    for i, q in enumerate(d["asked"]):
        qs = np.array(sorted(set(q)), int)
        if not len(qs):
            continue
        w = qidf[qs]
        cos = unit[qs] @ unit[known].T
        for j, r in enumerate(rows):
            if not len(r):
                continue
            best = cos[:, r].max(1)
            for f in floors:
                out[f][i, j] = (w * np.where(best >= f, best, 0)).sum() / max(w.sum(), 1e-9)
    return out


def subword_bm25(d, k1=1.2, b=0.75):
    """Okapi BM25 of each request against each row over their token ids."""
    tfs = [collections.Counter(r) for r in d["rows"]]
    lens = np.array([len(r) for r in d["rows"]], float)
    avg, n = max(lens.mean(), 1e-9), len(tfs)
    df = collections.Counter(t for r in d["rows"] for t in set(r))
    out = np.zeros((len(d["asked"]), n))
    for i, q in enumerate(d["asked"]):
        for t in set(q) & df.keys():
            idf = np.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            for j, tf in enumerate(tfs):
                if f := tf.get(t, 0):
                    out[i, j] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * lens[j] / avg))
    return out


def top_gap(z):
    """Each request's gap between its first and second standard score."""
    s = np.sort(z, 1)
    return s[:, -1] - s[:, -2]


def agreement(za, zb, n=10):
    """The share of each request's first `n` rows the two lists have in common."""
    ta, tb = np.argsort(-za, 1)[:, :n], np.argsort(-zb, 1)[:, :n]
    return np.array([len(set(a) & set(b)) / n for a, b in zip(ta, tb)])


def main():
    E0, data = prepare(*sys.argv[1:3])
    floors = (0.0, 0.3, 0.5, 0.7)
    lists = {}
    for name, d in data.items():
        zb, zc = standard(d["bm25"]), standard(cosines(E0, d, *SHIPPED))
        lists[name] = dict(zb=zb, zc=zc, gb=top_gap(zb), gc=top_gap(zc), agree=agreement(zb, zc),
                           maxsim={f: standard(m) for f, m in maxsim(E0, d, floors).items()},
                           subword=standard(subword_bm25(d)))

    def measure(score):
        return {name: metrics(ranked(score(lists[name]), d["keys"]), d["labels"]) for name, d in data.items()}

    report({(f, w, w3): measure(lambda l: l["zb"] + w * l["zc"] + w3 * l["maxsim"][f])
            for f, w, w3 in itertools.product(floors, WEIGHT, (0, 0.3, 0.5, 1.0, 1.5))},
           data, "maxsim floor, cosine weight, maxsim weight")
    adaptive = {(w, a, b, "gap"): measure(lambda l: l["zb"] + (w * np.exp(b * l["gc"] - a * l["gb"]))[:, None] * l["zc"])
                for w, a, b in itertools.product((0.7, 1.0, 1.5, 2.0), (0, 0.25, 0.5, 1.0), (0, 0.25, 0.5, 1.0))}
    adaptive |= {(w, a, 0, "agree"): measure(lambda l: l["zb"] + (w * (1 + a * (l["agree"] - 0.5)))[:, None] * l["zc"])
                 for w, a in itertools.product((0.7, 1.0, 1.5, 2.0), (0.25, 0.5, 1.0))}
    report(adaptive, data, "weight, a, b, by")
    report({(w, w3): measure(lambda l: l["zb"] + w * l["zc"] + w3 * l["subword"])
            for w, w3 in itertools.product(WEIGHT, (0, 0.25, 0.5, 0.75, 1.0))},
           data, "cosine weight, subword BM25 weight")


if __name__ == "__main__":
    main()
