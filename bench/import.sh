#!/usr/bin/env bash
# How long `capdir import openapi` takes on real documents: GitHub's REST description (about a
# thousand operations), Kubernetes' Swagger 2.0 description and the Petstore; each imported
# into a fresh directory, then once more into the same one (the re-import that must change
# nothing). Prints a markdown table: operations, rows written, seconds. The target: GitHub's
# description in under 10 s.
#   bench/import.sh [RUNS]   (default 3; the median is shown)
# Uses target/release/capdir when it exists, else target/debug/capdir (said in the table's
# title: a debug build is several times slower). The documents come from `.ci/deps`
# (tests/openapi/, or CAPDIR_OPENAPI_FIXTURES).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
fixtures="${CAPDIR_OPENAPI_FIXTURES:-tests/openapi}"
if [[ -x target/release/capdir ]]; then
  bin=target/release/capdir profile=release
elif [[ -x target/debug/capdir ]]; then
  bin=target/debug/capdir profile=debug
else
  echo "no capdir binary: cargo build --release (or cargo build)" >&2
  exit 1
fi

documents=(
  "GitHub (OpenAPI 3.0)|$fixtures/node_modules/@octokit/openapi/generated/api.github.com.json|--prefix github --category github --auth bearer:GITHUB_TOKEN"
  "Kubernetes (Swagger 2.0)|$fixtures/kubernetes/swagger-1.13.json|--prefix k8s --server https://k8s.example.com:6443"
  "Petstore (Swagger 2.0)|$fixtures/node_modules/@readme/oas-examples/2.0/json/petstore.json|--prefix petstore"
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Seconds of one run, with the JSON report kept for the counts.
timed() {  # out report doc flags...
  local out="$1" report="$2" doc="$3"
  shift 3
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2068
  "$bin" import openapi "$doc" --out "$out" --json $@ >"$report"
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

median() { sort -n | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)]}'; }

echo "### capdir import openapi ($profile build: $bin; median of $runs)"
echo
echo "| document | operations | rows written | first import (s) | re-import (s) | rows changed on re-import |"
echo "|---|---|---|---|---|---|"
for entry in "${documents[@]}"; do
  IFS='|' read -r name doc flags <<<"$entry"
  if [[ ! -f "$doc" ]]; then
    echo "| $name | missing: run .ci/deps | | | | |"
    continue
  fi
  first=() again=()
  for ((i = 0; i < runs; i++)); do
    rm -rf "$work/out"
    # shellcheck disable=SC2086
    first+=("$(timed "$work/out" "$work/first.json" "$doc" $flags)")
    # shellcheck disable=SC2086
    again+=("$(timed "$work/out" "$work/again.json" "$doc" $flags)")
  done
  counts="$(python3 - "$work/first.json" "$work/again.json" <<'PY'
import json, sys
first, again = (json.load(open(p)) for p in sys.argv[1:])
written = sum(r["status"] in ("new", "changed") for r in first["rows"])
changed = sum(r["status"] in ("new", "changed") for r in again["rows"])
print(first["operations"], written, changed)
PY
)"
  read -r operations written changed <<<"$counts"
  echo "| $name | $operations | $written | $(printf '%s\n' "${first[@]}" | median) | $(printf '%s\n' "${again[@]}" | median) | $changed |"
done
