#!/usr/bin/env python3
"""Produce capdir's token vectors (tokens.i8) and tokenizer (tokenizer.json) from the
WordLlama vectors that PyPI's wordllama 0.4.0.post1 ships (MIT licence; PROVENANCE.md).

    python3 models/wordllama/make.py [WHEEL]      # downloads the pinned wheel with pip when no WHEEL

Only numpy is needed. The output is byte-for-byte the committed files (SHA256SUMS says
which): a check, not a download, at build and ask time.

What it computes, per token of the 32,000-token vocabulary (Llama 2's SentencePiece BPE):
  1. WordLlama's `l2_supercat` 256-dimension vector (`embedding.weight`, float16): a token
     embedding trained to be averaged into a sentence vector;
  2. times a smooth-inverse-frequency weight a / (a + p(t)), a = 1e-5, with p(t) the Zipf
     estimate 1/(id+2) normalised (a BPE vocabulary's ids follow its merges, the common
     pieces first); chosen with ask's fusion settings on capdir's three development sets,
     across sets (eval/README.md);
  3. quantised to int8 per token: scale = max|v| / 127, q = round(v / scale).

tokenizer.json is the wheel's tokenizer with the parts ask uses (normaliser, BPE model,
added tokens); the post-processor and decoder are left out.

File layout (little-endian): b"CAPDIRTE", u32 tokens, u32 dims, f32 scale[tokens],
i8 vector[tokens][dims].
"""
import json, os, sys, zipfile
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from vectors import safetensor, sif, tokens_i8, wheel, write  # noqa: E402

WHEEL = "wordllama==0.4.0.post1"
WHEEL_SHA256 = "42c2c88907ace0b0681ac6f9092d6a300a6409a5d2d61071a3fb5e7159370c97"
# The wheel is built per Python version and platform; its files are the same in each.
PIP_ARGS = ("--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux2014_x86_64")
VECTORS = "wordllama/weights/l2_supercat_256.safetensors"
TOKENIZER = "wordllama/tokenizers/l2_supercat_tokenizer_config.json"
SIF = 1e-5


def main():
    path = wheel(sys.argv[1:], WHEEL, WHEEL_SHA256, PIP_ARGS)
    with zipfile.ZipFile(path) as z:
        weights = z.read(VECTORS)
        whole = json.loads(z.read(TOKENIZER))
    E = safetensor(weights, "embedding.weight").astype(np.float64)
    tokenizer = {k: whole[k] for k in ("version", "added_tokens", "normalizer", "model")}
    assert tokenizer["model"]["type"] == "BPE" and len(tokenizer["model"]["vocab"]) == len(E)
    write(HERE, {"tokens.i8": tokens_i8(E * sif(len(E), SIF)[:, None]),
                 "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode()})


if __name__ == "__main__":
    main()
