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
import hashlib, io, json, os, struct, subprocess, sys, tempfile, zipfile
import numpy as np

WHEEL = "wordllama==0.4.0.post1"
WHEEL_SHA256 = "42c2c88907ace0b0681ac6f9092d6a300a6409a5d2d61071a3fb5e7159370c97"
VECTORS = "wordllama/weights/l2_supercat_256.safetensors"
TOKENIZER = "wordllama/tokenizers/l2_supercat_tokenizer_config.json"
HERE = os.path.dirname(os.path.abspath(__file__))
SIF = 1e-5


def wheel_path(args):
    if args:
        return args[0]
    d = tempfile.mkdtemp()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.11", "--platform",
                    "manylinux2014_x86_64", "--disable-pip-version-check", "-d", d, WHEEL],
                   check=True)
    (name,) = os.listdir(d)
    return os.path.join(d, name)


def safetensor(blob, name):
    """One float16 tensor out of a safetensors file, read with numpy alone."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    t = header[name]
    assert t["dtype"] == "F16", t["dtype"]
    start, end = t["data_offsets"]
    return np.frombuffer(blob[8 + n + start:8 + n + end], dtype="<f2").reshape(t["shape"])


def main():
    path = wheel_path(sys.argv[1:])
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(path) as z:
        weights = z.read(VECTORS)
        whole = json.loads(z.read(TOKENIZER))
    E = safetensor(weights, "embedding.weight").astype(np.float64)
    tokenizer = {k: whole[k] for k in ("version", "added_tokens", "normalizer", "model")}
    assert tokenizer["model"]["type"] == "BPE" and len(tokenizer["model"]["vocab"]) == len(E)
    inv = 1 / np.arange(2, len(E) + 2)
    p = inv / inv.sum()
    V = E * (SIF / (SIF + p))[:, None]
    scale = np.abs(V).max(1) / 127
    scale[scale == 0] = 1
    q = np.rint(V / scale[:, None]).astype(np.int8)
    out = io.BytesIO()
    out.write(b"CAPDIRTE")
    out.write(struct.pack("<II", *q.shape))
    out.write(scale.astype("<f4").tobytes())
    out.write(q.tobytes())
    files = {"tokens.i8": out.getvalue(),
             "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode()}
    for name, data in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    with open(os.path.join(HERE, "SHA256SUMS"), "w") as f:
        for name, data in files.items():
            f.write(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    print(open(os.path.join(HERE, "SHA256SUMS")).read(), end="")


if __name__ == "__main__":
    main()
