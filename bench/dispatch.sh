#!/usr/bin/env bash
# Benchmark the dispatcher's invoke path against a bare Axum JSON handler, side by side in
# the same run: 32 connections, POST of an fn row (ECHO) with a durable receipt per call.
#   bench/dispatch.sh [SECONDS]   (default 10; needs wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
secs="${1:-10}"
cargo build --release --quiet --bin capdir --example bare_axum
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn

target/release/examples/bare_axum 127.0.0.1:18081 & pids+=($!)
target/release/capdir serve --site "$work/site" --addr 127.0.0.1:18082 \
  --ledger "sqlite:$work/ledger.sqlite" --data "$work/data" 2>"$work/serve.log" & pids+=($!)
for port in 18081 18082; do
  for _ in $(seq 100); do
    curl -s -o /dev/null -XPOST -H 'content-type: application/json' \
      "http://127.0.0.1:$port/api/dispatch" -d '{}' && break
    sleep 0.1
  done
done

run() { wrk -t2 -c32 -d"${secs}s" -s bench/post.lua "http://127.0.0.1:$1/api/dispatch" | grep '^RESULT'; }
read -r _ brps bp50 bp99 berr breq < <(run 18081)
read -r _ crps cp50 cp99 cerr creq < <(run 18082)
metrics=$(curl -s http://127.0.0.1:18082/metrics)
commits=$(awk '/^capdir_ledger_commit_seconds_count/ {print $2}' <<<"$metrics")
commit_s=$(awk '/^capdir_ledger_commit_seconds_sum/ {print $2}' <<<"$metrics")
receipts=$(target/release/capdir ledger verify --ledger "sqlite:$work/ledger.sqlite")
ratio=$(python3 -c "print(f'{$crps / $brps * 100:.0f}%')")

echo "| server | requests/s | p50 ms | p99 ms | errors | ratio |"
echo "|---|---|---|---|---|---|"
echo "| bare Axum JSON handler | $brps | $bp50 | $bp99 | $berr | 100% |"
echo "| capdir invoke ECHO + durable receipt | $crps | $cp50 | $cp99 | $cerr | $ratio |"
echo
echo "capdir requests: $creq; ledger: $receipts"
python3 -c "print(f'ledger: {$commits} commits, {$creq / max($commits, 1):.1f} receipts per commit, {$commit_s / max($commits, 1) * 1000:.2f} ms per commit (fsync included)')"
