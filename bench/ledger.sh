#!/usr/bin/env bash
# Invocations per second with durable receipts: one dispatcher on SQLite beside one and two
# dispatchers sharing one PostgreSQL ledger. wrk, 32 connections over 2 threads; with two
# dispatchers each thread loads its own (bench/spread.lua), and wrk merges the latencies.
# After each run the chain is verified and receipts are counted against answered calls; the
# table comes first, then the exit status is 1 when a run had wrk errors, a broken chain, or
# receipts that do not match the calls wrk saw acknowledged (each named on stderr).
#   bench/ledger.sh [SECONDS]   (default 10; needs wrk and PostgreSQL: .ci/deps)
#   CAPDIR_BIN=target/debug/capdir bench/ledger.sh 5   a binary built already (.ci/run uses
#                                  the tests' own: the receipts and the chain are checked the
#                                  same; the figures are a debug build's, not a release's)
# PostgreSQL: CAPDIR_BENCH_POSTGRES, else CAPDIR_TEST_POSTGRES, else the role .ci/deps makes;
# it needs CREATEDB (each run gets a fresh database, dropped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk (.ci/deps installs it)"; exit 1; }
command -v psql >/dev/null || { echo "needs psql and PostgreSQL (.ci/deps installs them)"; exit 1; }
secs="${1:-10}"
admin="${CAPDIR_BENCH_POSTGRES:-${CAPDIR_TEST_POSTGRES:-postgres://capdir:capdir@127.0.0.1:5432/capdir_test}}"
if [[ -n "${CAPDIR_BIN:-}" ]]; then
  bin="$CAPDIR_BIN"
else
  cargo build --release --quiet --bin capdir
  bin=target/release/capdir
fi
echo "binary: $bin"
work="$(mktemp -d)"
dbs=()
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${dbs[@]}"; do psql -q "$admin" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export CAPDIR_OWNER_KEY=bench-owner RUST_LOG=warn
"$bin" build catalogue --out "$work/site" >/dev/null 2>&1

# A fresh database named $1; prints its URL (the admin URL with the database replaced).
fresh_db() {
  psql -q "$admin" -c "CREATE DATABASE $1" >/dev/null
  dbs+=("$1")
}
db_url() { sed -E "s#^([a-z]+://[^/]*)/[^?]*#\1/$1#" <<<"$admin"; }

# serve PORT LEDGER: start a dispatcher and wait until it answers.
serve() {
  "$bin" serve --site "$work/site" --addr "127.0.0.1:$1" --ledger "$2" --data "$work/data-$1" \
    2>>"$work/serve-$1.log" &
  pids+=($!)
  for _ in $(seq 200); do
    curl -sf -o /dev/null "http://127.0.0.1:$1/api/dispatch?map=1" && return 0
    sleep 0.05
  done
  echo "dispatcher on port $1 did not start:" >&2
  cat "$work/serve-$1.log" >&2
  exit 1
}

stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}

# commits PORT...: ledger commits the dispatchers made, summed from /metrics.
commits() {
  local n=0 c
  for port in "$@"; do
    c=$(curl -s -H "x-owner-key: $CAPDIR_OWNER_KEY" "http://127.0.0.1:$port/metrics" | awk '/^capdir_ledger_commit_seconds_count/ {print $2}')
    n=$((n + ${c:-0}))
  done
  echo "$n"
}

conns=32
rows=()
failures=()
# run LABEL LEDGER PORT...: load the dispatchers on PORTs, then verify the chain.
run() {
  local label="$1" ledger="$2"
  shift 2
  local name="$label, $# dispatcher(s)"
  for port in "$@"; do serve "$port" "$ledger"; done
  # Warm up (connections, caches), then measure from a known receipt count.
  CAPDIR_BENCH_PORTS="$*" wrk -t2 -c"$conns" -d1s -s bench/spread.lua "http://127.0.0.1:$1/api/dispatch" >/dev/null
  # Let the warm-up's last requests land before counting from here.
  sleep 1
  local before_commits before_receipts
  before_commits=$(commits "$@")
  before_receipts=$("$bin" ledger verify --ledger "$ledger" | awk '{print $2}')
  local rps p50 p99 errors answers status_errors
  read -r _ rps p50 p99 errors answers status_errors < <(CAPDIR_BENCH_PORTS="$*" \
    wrk -t2 -c"$conns" -d"${secs}s" -s bench/spread.lua "http://127.0.0.1:$1/api/dispatch" | grep '^RESULT')
  local made_commits=$(($(commits "$@") - before_commits))
  stop_all
  # `ledger verify` says "ok: N receipts, …" or "broken at receipt …" (and exits 1).
  local verdict receipts="?" per_commit="?"
  verdict=$("$bin" ledger verify --ledger "$ledger") || true
  verdict="${verdict:-no verdict (its error is above)}"
  if [[ "$verdict" == ok:* ]]; then
    receipts=$(($(awk '{print $2}' <<<"$verdict") - before_receipts))
    per_commit=$(python3 -c "print(f'{$receipts / max($made_commits, 1):.1f}')")
  else
    failures+=("$name: ledger verify: $verdict")
  fi
  rows+=("| $label | $# | $rps | $p50 | $p99 | $errors | $receipts | $per_commit | ${verdict%%,*} |")

  ((errors == 0)) ||
    failures+=("$name: wrk saw $errors errors in $answers answers ($status_errors of them above 399)")
  # Every 2xx is a durable receipt, so fewer receipts than acknowledged calls is a lost one.
  # More can be right, by a bounded count: when wrk stops it abandons the one request in flight
  # on each connection (it never pipelines), which the dispatcher still runs and records: at
  # most one per connection more.
  local acked=$((answers - status_errors))
  if [[ "$receipts" != "?" ]] && ((receipts < acked || receipts > acked + conns)); then
    failures+=("$name: $receipts receipts in the ledger, $acked calls acknowledged (2xx) by wrk")
  fi
}

run "SQLite (WAL, synchronous=FULL)" "sqlite:$work/ledger.sqlite" 18101
pg_one="capdir_bench_$$_one" pg_two="capdir_bench_$$_two"
fresh_db "$pg_one"
run "PostgreSQL" "$(db_url "$pg_one")" 18101
fresh_db "$pg_two"
run "PostgreSQL" "$(db_url "$pg_two")" 18101 18102

echo "| ledger | dispatchers | invocations/s | p50 ms | p99 ms | errors | receipts | receipts per commit | chain |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "wrk -t2 -c32 -d${secs}s, POST ECHO with a durable receipt per call; $(nproc) cores shared by wrk,"
echo "the dispatchers and the database. PostgreSQL $(psql -tA "$admin" -c 'SHOW server_version'),"
echo "synchronous_commit=$(psql -tA "$admin" -c 'SHOW synchronous_commit'), fsync=$(psql -tA "$admin" -c 'SHOW fsync')."
echo "On one machine the second dispatcher shares its cores with the first, wrk and the database:"
echo "that row shows one chain kept under contention, not what a second machine adds."

if ((${#failures[@]})); then
  echo >&2
  printf 'FAILED %s\n' "${failures[@]}" >&2
  exit 1
fi
