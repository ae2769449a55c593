#!/usr/bin/env bash
# Ask latency, in-process and warm, on synthetic catalogues of 10,000 and 100,000 rows, with
# the MetaTool dev queries (long natural requests) as the load; plus index size and time.
#   bench/search.sh [ROWS...]    (default: 10000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
CAPDIR="$PWD/target/release/capdir"
OUT="${BENCH_OUT:-/tmp/capdir-bench-search}"
Q="${QUERIES:-../shared/eval/metatool/queries-dev.jsonl}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000)
echo "| rows | index MiB | index build ms | queries | mean ms | p99 ms |"
echo "|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  dir="$OUT/$n"
  if [ ! -d "$dir/catalogue" ]; then
    rm -rf "$dir"
    # Few commits: this measures search, not history.
    python3 bench/gen_catalogue.py "$dir" "$n" 0 1000 >/dev/null
  fi
  ms=$(cd "$dir" && "$CAPDIR" build catalogue --out site 2>&1 | awk '$1=="index"{print $2}')
  size=$(du -sm "$dir/site/index" | cut -f1)
  read -r queries mean p99 < <("$CAPDIR" eval --queries "$Q" --site "$dir/site" --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["queries"], round(d["mean_ms"],3), round(d["p99_ms"],3))')
  echo "| $n | $size | $ms | $queries | $mean | $p99 |"
done
