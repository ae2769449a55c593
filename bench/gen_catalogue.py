#!/usr/bin/env python3
"""Generate a synthetic capdir catalogue of N rows in a fresh Git repository with at least N
commits (one per row added, plus edits), using `git fast-import` so 100,000 commits take
seconds. Also writes the same rows as Hugo content for the side-by-side page benchmark.

usage: gen_catalogue.py OUT_DIR ROWS [EDITS] [ROWS_PER_COMMIT]
"""
import os
import random
import subprocess
import sys

WORDS = ("weather temperature forecast city github issue repository pull request search paper "
         "academic stock price market crypto currency exchange rate holiday calendar email send "
         "message slack channel translate text summary summarize image resize convert pdf audio "
         "music playlist recipe food restaurant hotel flight travel booking job resume career "
         "news headline sports score football movie book review product shopping price compare "
         "map route distance traffic parking air quality health fitness workout sleep").split()
TYPES = ["fn", "http", "agent"]


def row(i, rng, rev=0):
    key = f"SYN_{'_'.join(rng.choice(WORDS).upper() for _ in range(2))}_{i:06d}"
    kind = TYPES[i % 3]
    what = " ".join(rng.choice(WORDS) for _ in range(12))
    when = " ".join(rng.choice(WORDS) for _ in range(10))
    cat = rng.choice(WORDS[:20])
    if kind == "fn":
        target, payload = "echo", '["$1"]'
    elif kind == "http":
        target, payload = f"GET https://api.example.com/v1/{cat}/$1?q=$2", ""
    else:
        target, payload = "gw:openai/gpt-4o-mini", "You answer briefly."
    lines = [
        f"key: {key}", f"type: {kind}", f"target: \"{target}\"", f"category: {cat}",
        "content: |",
        f"  # WHAT: {what.capitalize()} (revision {rev}).",
        f"  # WHEN_TO_USE: {when}.",
        "  # ARGS: $1=first, $2=second",
        "  # EX: a|b",
        "  # OUTPUT: text",
    ]
    if payload:
        lines.append(f"  {payload}")
    lines += ["asks:", f"  - {what.split()[0]} {what.split()[1]} {key.split('_')[1].lower()}"]
    return key, "\n".join(lines) + "\n", what, cat


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    edits = int(sys.argv[3]) if len(sys.argv) > 3 else n // 10
    per_commit = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    rng = random.Random(42)
    os.makedirs(out, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", out], check=True)
    rows = [row(i, rng) for i in range(n)]
    fi = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=out, stdin=subprocess.PIPE)
    w = fi.stdin
    t = 1_700_000_000
    mark = 0

    def commit(msg, files):
        nonlocal t, mark
        t += 60
        mark += 1
        w.write(f"commit refs/heads/main\nmark :{mark}\ncommitter Bench <bench@example.com> {t} +0000\n".encode())
        m = msg.encode()
        w.write(f"data {len(m)}\n".encode() + m + b"\n")
        if mark > 1:
            w.write(f"from :{mark - 1}\n".encode())
        for path, data in files:
            body = data.encode()
            w.write(f"M 100644 inline {path}\ndata {len(body)}\n".encode() + body + b"\n")

    for start in range(0, n, per_commit):
        batch = rows[start:start + per_commit]
        commit(f"Add {batch[0][0]} and {len(batch) - 1} more", [(f"catalogue/{k}.yaml", text) for k, text, _, _ in batch])
    for e in range(edits):
        i = rng.randrange(n)
        key, text, _, _ = row(i, random.Random(i), rev=e + 1)
        # Same key (seeded by i), new revision text.
        rows[i] = (rows[i][0], text.replace(key, rows[i][0]), rows[i][2], rows[i][3])
        commit(f"Edit {rows[i][0]}", [(f"catalogue/{rows[i][0]}.yaml", rows[i][1])])
    w.close()
    if fi.wait() != 0:
        sys.exit("git fast-import failed")
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=out, check=True)

    # The same pages for Hugo: one markdown file per row, one minimal layout.
    hugo = os.path.join(out, "hugo")
    os.makedirs(os.path.join(hugo, "content", "k"), exist_ok=True)
    os.makedirs(os.path.join(hugo, "layouts", "_default"), exist_ok=True)
    with open(os.path.join(hugo, "hugo.toml"), "w") as f:
        f.write('baseURL = "http://127.0.0.1/"\ntitle = "bench"\ndisableKinds = ["taxonomy", "term", "RSS", "sitemap"]\n')
    with open(os.path.join(hugo, "layouts", "_default", "single.html"), "w") as f:
        f.write("<!doctype html><title>{{ .Title }}</title><main>{{ .Content }}</main>\n")
    with open(os.path.join(hugo, "layouts", "_default", "list.html"), "w") as f:
        f.write("<!doctype html><title>{{ .Title }}</title>\n")
    for key, text, what, cat in rows:
        with open(os.path.join(hugo, "content", "k", key + ".md"), "w") as f:
            f.write(f"---\ntitle: {key}\n---\n\n# {key}\n\n`{cat} › {key}`\n\n**What:** {what}\n\n```\n{text}```\n")
    print(f"{n} rows, {mark} commits in {out}")


main()
