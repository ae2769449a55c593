#!/usr/bin/env bash
# How fast could the dispatcher be with any ledger at all? The bare Axum handler beside four
# dispatchers, taking turns in each round under the same load as bench/dispatch.sh (wrk, 32
# connections, POST of ECHO):
#   disk     the shipped dispatcher, its SQLite ledger (WAL, synchronous=FULL) on this disk;
#   tmpfs    the same, its ledger on /dev/shm (the ledger's code without the device);
#   no-op    a build with bench/ceiling/ledger.patch, CAPDIR_CEILING=noop: the writer thread
#            chains each batch in memory and stores nothing (the thread hop stays);
#   inline   the same build, CAPDIR_CEILING=inline: the chain made on the request's own task,
#            no writer thread at all.
# No-op and inline keep nothing: they are experiments, never a dispatcher to run. They bound
# from above what any durable ledger can reach, since storing a receipt adds to them.
#   bench/dispatch_ceiling.sh [SECONDS_PER_ROUND] [ROUNDS]   (default 5 s, 5 rounds; needs wrk)
#   CEILING_TARGET=DIR   the patched build's target directory (default target/ceiling): its
#                        first build is a cold release build (some 8 min on 2 cores), each
#                        later one builds capdir alone (2 min)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk"; exit 1; }
secs="${1:-5}" rounds="${2:-5}"
cargo build --release --quiet --bin capdir --example bare_axum
here="$PWD"
work="$(mktemp -d)" shm="$(mktemp -d -p /dev/shm)"
pids=()
tree=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -z "$tree" ]] || git -C "$here" worktree remove --force "$tree" 2>/dev/null || true
  rm -rf "$work" "$shm"
}
trap cleanup EXIT

# The patched build, from a worktree of HEAD, so this checkout is never touched; at the same
# path each run, so the target directory's build of it is reused.
target="$(realpath -m "${CEILING_TARGET:-target/ceiling}")"
tree="$target/tree"
mkdir -p "$target"
git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git worktree add --quiet --detach "$tree" HEAD
git -C "$tree" apply "$here/bench/ceiling/ledger.patch"
CARGO_TARGET_DIR="$target" cargo build --release --quiet --locked \
  --manifest-path "$tree/Cargo.toml" --bin capdir
ceiling="$target/release/capdir"

export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn
serve() { # BINARY PORT LEDGER_DIR [CEILING]
  CAPDIR_CEILING="${4:-}" "$1" serve --site "$3/site" --addr "127.0.0.1:$2" \
    --ledger "sqlite:$3/ledger.sqlite" --data "$3/data" 2>/dev/null &
  pids+=($!)
}
target/release/examples/bare_axum 127.0.0.1:18091 & pids+=($!)
serve target/release/capdir 18092 "$work/disk"
serve target/release/capdir 18093 "$shm/tmpfs"
serve "$ceiling" 18094 "$shm/noop" noop
serve "$ceiling" 18095 "$shm/inline" inline
source bench/wrk_load.sh
source bench/median.sh
ready 18091 18092 18093 18094 18095

names=(disk tmpfs no-op inline)
declare -A ratios
echo "Each cell: % of the bare handler's requests/s (server CPU µs per request, p99 ms, errors)."
echo
echo "| round | bare req/s (CPU µs) | disk | tmpfs | no-op | inline |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  read -r brps _ _ _ _ bcpu < <(load 18091 "${pids[0]}" "$secs")
  row="| $r | $brps ($bcpu)"
  for i in 0 1 2 3; do
    read -r rps _ p99 err _ cpu < <(load $((18092 + i)) "${pids[$((i + 1))]}" "$secs")
    ratio=$(python3 -c "print(f'{$rps / $brps * 100:.1f}')")
    ratios[$i]+="$ratio "
    row+=" | $ratio% ($cpu µs, $p99, $err)"
  done
  echo "$row |"
done
echo
for i in 0 1 2 3; do
  echo "median, ${names[$i]}: $(tr ' ' '\n' <<<"${ratios[$i]}" | grep . | median)% of the bare handler"
done
