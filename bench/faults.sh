#!/usr/bin/env bash
# Faults under load, and what each does to callers and receipts: kill -9 of the dispatcher
# (SQLite and PostgreSQL), the ledger's disk full, PostgreSQL restarted under two dispatchers,
# an upstream that hangs, trickles or resets, and builds swapped into the served site (locally
# and through --follow). After each, every receipt a caller was answered with must be in the
# ledger once and `capdir ledger verify` pass. Prints a table (the README's), then exits 1
# when a scenario lost a receipt or broke its expectation (named on stderr).
#   bench/faults.sh [SECONDS] [SCENARIO...]   (default 4 s of load per phase; all scenarios:
#       kill-sqlite kill-postgres disk-full postgres-restart upstream-hang upstream-slow
#       upstream-reset site-swap follow-swap)
#   CAPDIR_BIN=target/release/capdir bench/faults.sh   a binary built already
# Needs PostgreSQL (.ci/deps) and root or sudo for the small tmpfs and the cluster restart;
# a scenario that cannot run here is listed as skipped, with why.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${CAPDIR_BIN:-}" ]]; then
  bin="$CAPDIR_BIN"
else
  cargo build --release --quiet --bin capdir
  bin=target/release/capdir
fi
secs="${1:-4}"
(($#)) && shift
exec python3 bench/faults.py "$bin" "$secs" "$@"
