#!/usr/bin/env bash
# A/B two capdir binaries on the invoke path, side by side in one run: each serves its own
# site and ledger, and wrk (32 connections, bench/post.lua) alternates between them, so the
# machine's noise falls on both alike. Besides requests/s it prints the server's CPU time per
# request (user + system, from /proc), which moves far less with the machine's noise.
#   bench/dispatch_ab.sh OLD_BINARY NEW_BINARY [SECONDS] [ROUNDS]   (default 5 s, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
old="$1" new="$2" secs="${3:-5}" rounds="${4:-3}"
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn
"$old" serve --site "$work/site-a" --addr 127.0.0.1:18090 --ledger "sqlite:$work/a.sqlite" \
  --data "$work/data-a" 2>"$work/a.log" & pids+=($!)
"$new" serve --site "$work/site-b" --addr 127.0.0.1:18091 --ledger "sqlite:$work/b.sqlite" \
  --data "$work/data-b" 2>"$work/b.log" & pids+=($!)
for port in 18090 18091; do
  for _ in $(seq 300); do
    curl -s -o /dev/null "http://127.0.0.1:$port/api/dispatch?map=1" && break
    sleep 0.2
  done
done
source bench/wrk_load.sh
echo "| round | old requests/s | old p99 ms | old CPU µs/req | new requests/s | new p99 ms | new CPU µs/req |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  read -r orps _ op99 _ _ ocpu < <(load 18090 "${pids[0]}" "$secs")
  read -r nrps _ np99 _ _ ncpu < <(load 18091 "${pids[1]}" "$secs")
  echo "| $r | $orps | $op99 | $ocpu | $nrps | $np99 | $ncpu |"
done
