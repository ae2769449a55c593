#!/usr/bin/env bash
# What a token's limits cost an invocation: one dispatcher, two tokens for ECHO that differ
# only in their limits (none, or every limit at once: a rate, a daily count, a per-row count
# and the loop breaker, all far from reached), taking turns ROUNDS times so the machine's
# noise falls on both alike. The ratio of throughputs is taken per round; its median is
# reported against the target (a budget check costs under 5% of an fn call's throughput).
#   bench/budget.sh [SECONDS_PER_ROUND] [ROUNDS]   (default 5 s, 5 rounds; needs wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
secs="${1:-5}" rounds="${2:-5}"
cargo build --release --quiet --bin capdir
bin=target/release/capdir
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn
export CAPDIR_TOKEN_KEY=bench-token-key-0123456789abcdef0123456789
port=18083 base="http://127.0.0.1:18083"
$bin build catalogue --out "$work/site" --dispatcher-url "$base" >/dev/null
mint() {
  $bin token mint --keys ECHO --ttl 1d --audience "$base" --site "$work/site" \
    --data "$work/data" --ledger "sqlite:$work/ledger.sqlite" "$@" | tail -n 1
}
plain=$(mint)
limited=$(mint --rate 1000000000/min --daily 1000000000000 --per-row 1000000000000 \
  --max-repeats 1000000000000 --repeat-window 1h)
$bin serve --site "$work/site" --addr "127.0.0.1:$port" --ledger "sqlite:$work/ledger.sqlite" \
  --data "$work/data" 2>"$work/serve.log" & pids+=($!)
for _ in $(seq 100); do
  curl -s -o /dev/null "$base/api/dispatch?map=1" && break
  sleep 0.1
done

source bench/wrk_load.sh
source bench/median.sh

echo "| round | no limits req/s | p99 ms | CPU µs/req | with limits req/s | p99 ms | errors | CPU µs/req | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
ratios=()
for r in $(seq "$rounds"); do
  read -r prps _ pp99 _ _ pcpu < <(CAPDIR_BENCH_TOKEN=$plain load "$port" "${pids[0]}" "$secs")
  read -r lrps _ lp99 lerr _ lcpu < <(CAPDIR_BENCH_TOKEN=$limited load "$port" "${pids[0]}" "$secs")
  ratio=$(python3 -c "print(f'{$lrps / $prps * 100:.1f}')")
  ratios+=("$ratio")
  echo "| $r | $prps | $pp99 | $pcpu | $lrps | $lp99 | $lerr | $lcpu | $ratio% |"
done
median=$(printf '%s\n' "${ratios[@]}" | median)
echo
echo "median: with limits at $median% of the throughput without (target: at least 95%)"
refused=$(curl -s -H "x-owner-key: $CAPDIR_OWNER_KEY" "$base/metrics" | awk '/^capdir_invocations_total.*REFUSED/ {s += $2} END {print s + 0}')
echo "refused invocations: $refused (a limit reached would show here)"
