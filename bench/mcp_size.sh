#!/usr/bin/env bash
# What an agent host holds after tools/list: the bytes of the result (every page, as capdir
# serialises it) and an estimate of the tokens (4 bytes a token), for the bundled catalogue and
# a generated catalogue, in both projections. Talks to `capdir mcp` over stdio with plain
# JSON-RPC. Sizes do not depend on the build profile, so the debug binary does.
#   bench/mcp_size.sh [ROWS...]    (default: 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet
CAPDIR="${CAPDIR:-$PWD/target/debug/capdir}"
OUT="${BENCH_OUT:-/tmp/capdir-bench-mcp}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(1000)
mkdir -p "$OUT"

# The bundled catalogue, in a Git repository of its own (history comes from Git).
bundled="$OUT/bundled"
rm -rf "$bundled" && mkdir -p "$bundled"
cp -r catalogue "$bundled/catalogue"
git -C "$bundled" init -q -b main
git -C "$bundled" add -A
git -C "$bundled" -c user.name=Bench -c user.email=bench@example.com -c commit.gpgsign=false \
  commit -q -m "The bundled catalogue"
"$CAPDIR" build "$bundled/catalogue" --out "$bundled/site" 2>/dev/null
sites=("bundled:$bundled/site")
for n in "${sizes[@]}"; do
  dir="$OUT/$n"
  if [ ! -d "$dir/catalogue" ]; then
    rm -rf "$dir"
    python3 bench/gen_catalogue.py "$dir" "$n" 0 1000 >/dev/null
  fi
  "$CAPDIR" build "$dir/catalogue" --out "$dir/site" 2>/dev/null
  sites+=("generated $n rows:$dir/site")
done

# One stdio session: initialize, then tools/list page by page; prints tools, pages, bytes.
measure() {
  python3 - "$CAPDIR" "$1" "$2" "$OUT" <<'PY'
import json, subprocess, sys
capdir, site, projection, out = sys.argv[1:5]
p = subprocess.Popen(
    [capdir, "mcp", "--site", site, "--mcp", projection,
     "--ledger", f"sqlite:{out}/ledger.sqlite", "--data", f"{out}/data"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
def ask(i, method, params):
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
    p.stdin.flush()
    line = p.stdout.readline().rstrip("\n")
    prefix = '{"jsonrpc":"2.0","id":%d,"result":' % i
    assert line.startswith(prefix) and line.endswith("}"), line[:200]
    return line[len(prefix):-1]  # the result exactly as serialised
ask(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "bench", "version": "1"}})
p.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
tools = pages = size = 0
cursor = None
while True:
    raw = ask(pages + 1, "tools/list", {"cursor": cursor} if cursor else {})
    result = json.loads(raw)
    pages += 1
    tools += len(result["tools"])
    size += len(raw.encode())
    cursor = result.get("nextCursor")
    if not cursor:
        break
p.stdin.close()
p.wait()
print(tools, pages, size)
PY
}

echo "| catalogue | projection | tools | pages (100 a page) | tools/list bytes | tokens (bytes/4) |"
echo "|---|---|---:|---:|---:|---:|"
for entry in "${sites[@]}"; do
  name="${entry%%:*}" site="${entry#*:}"
  for projection in full meta; do
    read -r tools pages bytes < <(measure "$site" "$projection")
    echo "| $name | $projection | $tools | $pages | $bytes | $((bytes / 4)) |"
  done
done
