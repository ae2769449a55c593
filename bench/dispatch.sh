#!/usr/bin/env bash
# Benchmark the dispatcher's invoke path against a bare Axum JSON handler, side by side in
# the same run: 32 connections, POST of an fn row (ECHO) with a durable receipt per call.
# The two servers take turns, ROUNDS times, so the machine's noise falls on both alike; the
# ratio is taken per round and its median reported.
#   bench/dispatch.sh [SECONDS_PER_ROUND] [ROUNDS] [FLOOR]   (default 5 s, 5 rounds; needs wrk)
# The table is printed either way; the exit status is 1 when a call failed, when the chain does
# not verify, or when the median ratio is under FLOOR percent (.ci/run bench sets one).
#   LEDGER_DIR=DIR   where the receipt ledger's SQLite file lives (default: a scratch directory
#                    on this disk); LEDGER_DIR=/dev/shm times the same ledger without the disk's
#                    writes and fsyncs, to tell what the device costs from what the code does.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
secs="${1:-5}" rounds="${2:-5}" floor="${3:-0}"
cargo build --release --quiet --bin capdir --example bare_axum
work="$(mktemp -d)"
ledger="$(mktemp -d -p "${LEDGER_DIR:-$work}")"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work" "$ledger"' EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn

target/release/examples/bare_axum 127.0.0.1:18081 & pids+=($!)
target/release/capdir serve --site "$work/site" --addr 127.0.0.1:18082 \
  --ledger "sqlite:$ledger/ledger.sqlite" --data "$work/data" 2>"$work/serve.log" & pids+=($!)
source bench/wrk_load.sh
source bench/median.sh
ready 18081 18082

echo "| round | bare req/s | bare p50 ms | bare p99 ms | bare CPU µs/req | capdir req/s | capdir p50 ms | capdir p99 ms | capdir errors | capdir CPU µs/req | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
ratios=() total=0 errors=0
for r in $(seq "$rounds"); do
  read -r brps bp50 bp99 _ _ bcpu < <(load 18081 "${pids[0]}" "$secs")
  read -r crps cp50 cp99 cerr creq ccpu < <(load 18082 "${pids[1]}" "$secs")
  total=$((total + creq)) errors=$((errors + cerr))
  ratio=$(python3 -c "print(f'{$crps / $brps * 100:.1f}')")
  ratios+=("$ratio")
  echo "| $r | $brps | $bp50 | $bp99 | $bcpu | $crps | $cp50 | $cp99 | $cerr | $ccpu | $ratio% |"
done
median=$(printf '%s\n' "${ratios[@]}" | median)
echo
echo "median ratio: $median% of the bare handler (target: at least 60%; floor: $floor%)"
metrics=$(curl -s -H "x-owner-key: $CAPDIR_OWNER_KEY" http://127.0.0.1:18082/metrics)
commits=$(awk '/^capdir_ledger_commit_seconds_count/ {print $2}' <<<"$metrics")
commit_s=$(awk '/^capdir_ledger_commit_seconds_sum/ {print $2}' <<<"$metrics")
verdict=$(target/release/capdir ledger verify --ledger "sqlite:$ledger/ledger.sqlite") && verified=1 || verified=0
echo "capdir requests: $total; ledger: $verdict"
python3 -c "print(f'ledger: {$commits} commits, {$total / max($commits, 1):.1f} receipts per commit, {$commit_s / max($commits, 1) * 1000:.2f} ms per commit (fsync included)')"
failed=0
((errors == 0)) || { echo "FAILED: $errors calls failed" >&2; failed=1; }
((verified)) || { echo "FAILED: the ledger's chain does not verify" >&2; failed=1; }
if python3 -c "import sys; sys.exit(0 if $median >= $floor else 1)"; then :; else
  echo "FAILED: the dispatcher fell to $median% of the bare handler, under the floor of $floor%" >&2
  failed=1
fi
exit "$failed"
