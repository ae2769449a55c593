#!/usr/bin/env bash
# Ask latency, in-process and warm, on synthetic catalogues of 10,000 and 100,000 rows, with
# the MetaTool dev queries (long natural requests) as the load; plus index size, build time
# and the memory the row vectors take. Each ranking (lexical, semantic, fused) is timed.
#   bench/search.sh [ROWS...]    (default: 10000 100000)
#   REFERENCE=/path/to/older/capdir bench/search.sh   adds that binary's build and ask, run
#                                                     on the same catalogue, side by side
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
CAPDIR="$PWD/target/release/capdir"
OUT="${BENCH_OUT:-/tmp/capdir-bench-search}"
Q="${QUERIES:-eval/metatool/queries-dev.jsonl}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000)

# build BINARY DIR SITE: the index step's milliseconds (lexical index and row vectors).
# This capdir builds over its own site in place; --full times the whole index instead.
build() { (cd "$2" && "$1" build catalogue --out "$3" "${@:4}" 2>&1 | awk '$1=="index"{print $2}'); }
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
RUNS="${RUNS:-3}"  # builds per binary, alternating with the reference's; the median is shown
# ask BINARY SITE [ARGS]: mean and p99 ms of one ranking.
ask() {
  "$1" eval --queries "$Q" --site "$2" --json "${@:3}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["mean_ms"],3), round(d["p99_ms"],3))'
}

echo "| rows | binary | index MiB | row vectors MiB | index build ms | ranking | mean ms | p99 ms |"
echo "|---|---|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  dir="$OUT/$n"
  if [ ! -d "$dir/catalogue" ]; then
    rm -rf "$dir"
    # Few commits: this measures search, not history.
    python3 bench/gen_catalogue.py "$dir" "$n" 0 1000 >/dev/null
  fi
  this=(); ref=()
  for ((i = 0; i < RUNS; i++)); do
    this+=("$(build "$CAPDIR" "$dir" site --full)")
    [ -z "${REFERENCE:-}" ] || ref+=("$(build "$REFERENCE" "$dir" site-reference)")
  done
  ms=$(median "${this[@]}")
  size=$(du -sm "$dir/site/index" | cut -f1)
  vec=$(python3 -c "import os,sys; print(round(os.path.getsize(sys.argv[1])/2**20,1))" "$dir/site/index/semantic.bin")
  for ranking in lexical semantic fused; do
    read -r mean p99 < <(ask "$CAPDIR" "$dir/site" --ranking "$ranking")
    echo "| $n | this | $size | $vec | $ms | $ranking | $mean | $p99 |"
  done
  if [ -n "${REFERENCE:-}" ]; then
    ms=$(median "${ref[@]}")
    size=$(du -sm "$dir/site-reference/index" | cut -f1)
    read -r mean p99 < <(ask "$REFERENCE" "$dir/site-reference")
    echo "| $n | reference | $size | – | $ms | its own | $mean | $p99 |"
  fi
done
