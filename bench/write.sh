#!/usr/bin/env bash
# Benchmark the write API: how long from sending a row to the dispatcher until the next request
# is served the new row (write → live), on a generated catalogue in Git, beside the rebuilds a
# contributor's `capdir build` makes after pulling one changed row (in place, and in full).
#   bench/write.sh [ROWS]        (default 10000 rows with ROWS/10 edits: 11,000 commits)
#   WRITES=40                    writes per kind
#   PROFILE=debug                measure a debug build (target/debug) instead of release
#   CAPDIR=PATH                  measure this capdir binary as it is (nothing is built)
#   BENCH_OUT=DIR                where the repository and the site live (default
#                                /tmp/capdir-write-bench; /dev/shm/... keeps disk noise out)
#
# Each write is a real HTTP request to `capdir serve --catalogue catalogue --write direct`:
# write → live is from sending it until a GET of the row's contract shows the change (the
# answer to the write comes once the row is live, so that GET is the next request). Kinds:
# an edit of a row's docstring (PATCH content: the row is indexed again; rows whose ask finds
# them first, since the gate refuses an edit after which a row's asks no longer find it), an
# edit of its examples (PATCH examples: nothing the index holds), and a new row (PUT), each
# sent once the pages that list every row have caught up with the previous write
# ("isolated"); then docstring edits sent back to back while those pages are still being
# written. "pages settled" is how long after the write the listing pages and build.json name
# its commit.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="$PWD/bench"
ROWS="${1:-10000}"
WRITES="${WRITES:-40}"
PROFILE="${PROFILE:-release}"
OUT="${BENCH_OUT:-/tmp/capdir-write-bench}"
if [ -n "${CAPDIR:-}" ]; then
  CAPDIR="$(cd "$(dirname "$CAPDIR")" && pwd)/$(basename "$CAPDIR")"
  PROFILE="$("$CAPDIR" --version) at $CAPDIR"
elif [ "$PROFILE" = release ]; then
  cargo build --release --quiet
  CAPDIR="$PWD/target/release/capdir"
else
  cargo build -j 1 --quiet
  CAPDIR="$PWD/target/$PROFILE/capdir"
fi
mkdir -p "$OUT"
repo="$OUT/$ROWS"
if [ ! -d "$repo/catalogue" ]; then
  python3 bench/gen_catalogue.py "$repo" "$ROWS" "$((ROWS / 10))" >/dev/null
  rm -rf "$repo/hugo"
fi
work="$OUT/run-$$"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work"
cp -a "$repo" "$work/repo"
cd "$work/repo"
commits=$(git rev-list --count HEAD)
site="$work/site"

source "$bench/median.sh"
seconds() { /usr/bin/time -f "%e" "$@" 2>&1 >/dev/null | tail -1; }

echo "building the site from nothing ($ROWS rows, $commits commits, $PROFILE)…" >&2
cold=$(seconds "$CAPDIR" build catalogue --out "$site")

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The same dispatcher address as `capdir build`'s default, so the site built above is the one
# served (a site made for another address is built anew).
CAPDIR_OWNER_KEY=bench-owner "$CAPDIR" serve --catalogue catalogue --site "$site" --write direct \
  --addr "127.0.0.1:$port" --base-url http://127.0.0.1:8080 \
  --ledger "sqlite:$work/ledger.sqlite" --data "$work/data" \
  >"$work/serve.log" 2>&1 &
pid=$!

python3 - "$port" "$site" "$WRITES" <<'PY'
import http.client, json, os, random, statistics, sys, time, urllib.parse
port, site, writes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
def request(method, path, body=None, ctype="application/json"):
    headers = {"x-owner-key": "bench-owner", "content-type": ctype}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()
deadline = time.time() + 120
while True:
    try:
        if request("GET", "/api/dispatch?map=1")[0] == 200:
            break
    except OSError:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if time.time() > deadline:
        sys.exit("capdir serve did not start")
    time.sleep(0.2)
keys = sorted(f[:-5] for f in os.listdir("catalogue") if f.endswith(".yaml"))
rng = random.Random(7)

def manifest_commit():
    try:
        with open(os.path.join(site, "build.json"), "rb") as f:
            head = f.read(200).decode("utf-8", "replace")
        return json.loads(head[: head.index(',"capdir"')] + "}")["commit"]
    except (OSError, ValueError, KeyError):
        return None

def wait_pages(commit, since):
    while manifest_commit() != commit:
        if time.perf_counter() - since > 60:
            sys.exit("the listing pages never followed")
        time.sleep(0.002)
    return (time.perf_counter() - since) * 1000

def ask_of(key):
    with open(f"catalogue/{key}.yaml") as f:
        text = f.read()
    return text.split("asks:\n  - ", 1)[1].splitlines()[0]

def found_first(key):
    status, body = request("GET", "/api/dispatch?ask=" + urllib.parse.quote(ask_of(key)))
    return status == 200 and json.loads(body).get("best", {}).get("key") == key

# Rows whose ask finds them first, for the docstring edits.
firsts = []
for key in rng.sample(keys, len(keys)):
    if found_first(key):
        firsts.append(key)
    if len(firsts) >= 3 * writes:
        break
edited = iter(firsts)

def patch(key, fields, check, isolated, refusable=False):
    t0 = time.perf_counter()
    status, body = request("PATCH", f"/api/directory/{key}", json.dumps(fields))
    if status == 422 and refusable:
        return None
    if status != 201:
        sys.exit(f"PATCH {key}: {status} {body[:400]!r}")
    status, contract = request("GET", f"/api/dispatch?key={key}&format=json")
    live = (time.perf_counter() - t0) * 1000
    if status != 200 or not check(json.loads(contract)):
        sys.exit(f"{key} not live after its write: {status}")
    pages = wait_pages(json.loads(body)["commit"], t0) if isolated else None
    return live, pages

def edit_docstring(isolated):
    # An edit after which the row's ask no longer finds it in the top 3 is refused by the gate
    # (422, nothing changed): such a row is skipped for the next one.
    for key in edited:
        with open(f"catalogue/{key}.yaml") as f:
            text = f.read()
        content = text.split("content: |\n", 1)[1].split("asks:\n", 1)[0]
        content = "".join(line[2:] + "\n" for line in content.splitlines())
        # The row's own ask repeated: an edit of its words, not new ones (a word no row uses
        # weighs the most in its vector and could move it off its ask).
        mark = f"[{ask_of(key)}]"
        content = content.replace(").\n", f", {mark}).\n", 1)
        took = patch(key, {"content": content}, lambda c: mark in c["what"], isolated, True)
        if took is not None:
            return took
    sys.exit("every row's docstring edit was refused by the gate")

def edit_examples(isolated):
    key = rng.choice(keys)
    example = f"a{rng.randrange(1_000_000)}|b"
    return patch(key, {"examples": [example]}, lambda c: c["examples"] == [example], isolated)

def create(i):
    key = f"BENCH_NEW_ROW_{i:04d}"
    text = (f"key: {key}\ntype: fn\ntarget: echo\ncategory: bench\ncontent: |\n"
            f"  # WHAT: Bench row {i} that echoes its words.\n  # WHEN_TO_USE: Benchmarks.\n"
            f"  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n")
    t0 = time.perf_counter()
    status, body = request("PUT", f"/api/directory/{key}", text, "application/yaml")
    if status != 201:
        sys.exit(f"PUT {key}: {status} {body[:300]!r}")
    status, _ = request("GET", f"/api/dispatch?key={key}&format=json")
    live = (time.perf_counter() - t0) * 1000
    if status != 200:
        sys.exit(f"{key} not live after its write: {status}")
    return live, wait_pages(json.loads(body)["commit"], t0)

edit_examples(True)  # the first write warms what a dispatcher keeps between writes
rows = []
def summary(name, samples):
    live = sorted(s[0] for s in samples)
    pages = sorted(s[1] for s in samples if s[1] is not None)
    p90 = lambda xs: xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    rows.append((name, len(live), statistics.median(live), p90(live),
                 f"{statistics.median(pages):.0f}" if pages else "–"))
summary("edit a docstring (PATCH content), isolated", [edit_docstring(True) for _ in range(writes)])
summary("edit examples (PATCH examples), isolated", [edit_examples(True) for _ in range(writes)])
summary("new row (PUT), isolated", [create(i) for i in range(writes)])
summary("edit a docstring, back to back", [edit_docstring(False) for _ in range(writes)])
print("| write → live | writes | median ms | p90 ms | pages settled, median ms |")
print("|---|---|---|---|---|")
for name, n, med, p90v, pages in rows:
    print(f"| {name} | {n} | {med:.1f} | {p90v:.1f} | {pages} |")
PY
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

# What a contributor's `capdir build` does after pulling one changed row: in place, and in full.
edit_one() {
  f=$(find catalogue -name '*.yaml' | sort | sed -n "$1p")
  sed -i "s/# OUTPUT: text.*/# OUTPUT: text, edited $1/" "$f"
  git -c user.name=B -c user.email=b@example.com commit -qam "edit one row ($1)"
}
inplace=() full=()
for r in 1 2 3; do
  edit_one "$((r * 7))"; inplace+=("$(seconds "$CAPDIR" build catalogue --out "$site")")
  edit_one "$((r * 7 + 1))"; full+=("$(seconds "$CAPDIR" build catalogue --out "$site" --full)")
done
echo
echo "$ROWS rows, $commits commits, $PROFILE, in $OUT:"
echo
echo "| rebuild after one row changed (git pull) | median s | runs |"
echo "|---|---|---|"
echo "| capdir build (in place) | $(printf '%s\n' "${inplace[@]}" | median) | ${inplace[*]} |"
echo "| capdir build --full | $(printf '%s\n' "${full[@]}" | median) | ${full[*]} |"
echo "| cold build, for reference | $cold | 1 |"
