#!/usr/bin/env bash
# A three-step flow through the dispatcher beside a single fn call, side by side on one
# dispatcher: POST HASH_AND_TIMESTAMP (SHA256 > NOW > ECHO, a receipt for each step and one for
# the flow: four per call) against POST ECHO (one receipt), 32 connections, the two taking
# turns ROUNDS times so the machine's noise falls on both alike. Prints each round and the
# median of flow/fn throughput (target: at least 50%).
#   bench/flow.sh [SECONDS_PER_ROUND] [ROUNDS]   (default 5 s, 5 rounds; needs wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
secs="${1:-5}" rounds="${2:-5}"
cargo build --release --quiet --bin capdir
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn
target/release/capdir serve --site "$work/site" --addr 127.0.0.1:18083 \
  --ledger "sqlite:$work/ledger.sqlite" --data "$work/data" 2>"$work/serve.log" & pids+=($!)
for _ in $(seq 200); do
  curl -sf -o /dev/null "http://127.0.0.1:18083/api/dispatch?map=1" && break
  sleep 0.1
done

source bench/wrk_load.sh
source bench/median.sh

echo "| round | fn req/s | fn p50 ms | fn p99 ms | fn errors | flow req/s | flow p50 ms | flow p99 ms | flow errors | flow receipts/s | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
ratios=() errors=0
for r in $(seq "$rounds"); do
  read -r frps fp50 fp99 ferr _ _ < <(CAPDIR_BENCH_KEY=ECHO load 18083 "${pids[0]}" "$secs")
  read -r wrps wp50 wp99 werr _ _ < <(CAPDIR_BENCH_KEY=HASH_AND_TIMESTAMP load 18083 "${pids[0]}" "$secs")
  errors=$((errors + ferr + werr))
  ratio=$(python3 -c "print(f'{$wrps / $frps * 100:.1f}')")
  ratios+=("$ratio")
  echo "| $r | $frps | $fp50 | $fp99 | $ferr | $wrps | $wp50 | $wp99 | $werr | $(python3 -c "print(f'{$wrps * 4:.0f}')") | $ratio% |"
done
median=$(printf '%s\n' "${ratios[@]}" | median)
echo
echo "median: a three-step flow runs at $median% of a single fn call's throughput (target: at least 50%)"
echo "ledger: $(target/release/capdir ledger verify --ledger "sqlite:$work/ledger.sqlite")"
((errors == 0)) || { echo "FAILED: $errors errors" >&2; exit 1; }
