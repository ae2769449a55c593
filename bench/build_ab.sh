#!/usr/bin/env bash
# A/B two capdir binaries on the full build, side by side in one run: one generated catalogue,
# each round a full build by each binary into a directory that did not exist, taking turns, so
# the machine's noise falls on both alike. Prints each build's wall time, the CPU it used
# (user + system) and its history and pages steps (RUST_LOG=info), then the medians.
#   bench/build_ab.sh OLD_BINARY NEW_BINARY [ROWS] [ROUNDS]   (default 10000 rows, 5 rounds)
#   BENCH_OUT=DIR   where the catalogue lives (default /dev/shm/capdir-build-ab: tmpfs, as
#                   bench/build.sh's figures against Hugo)
set -euo pipefail
cd "$(dirname "$0")/.."
old="$(realpath "$1")" new="$(realpath "$2")" rows="${3:-10000}" rounds="${4:-5}"
dir="${BENCH_OUT:-/dev/shm/capdir-build-ab}/$rows"
[ -d "$dir/catalogue" ] || python3 bench/gen_catalogue.py "$dir" "$rows" "$((rows / 10))" 1 >/dev/null
sites=()
trap 'rm -rf "${sites[@]}"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
step() { grep -oP "^  $1 +\K[0-9.]+" "$2"; }
declare -A took cpu
echo "| round | binary | build s | CPU s | history ms | pages ms |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  for side in old new; do
    bin="${!side}" site="$dir/site-ab-$$-$r-$side"
    sites+=("$site")
    log="$(mktemp)" times="$(mktemp)"
    sync
    start=$(date +%s.%N)
    (cd "$dir" && RUST_LOG=info /usr/bin/time -o "$times" -f "%U %S" "$bin" build catalogue --out "$site") >"$log" 2>&1
    s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.3f}')")
    c=$(awk '{printf "%.2f", $1 + $2}' "$times")
    grep -q "^built $rows rows" "$log" || { echo "$side did not build:"; cat "$log"; exit 1; }
    echo "| $r | $side | $s | $c | $(step history "$log") | $(step pages "$log") |"
    took[$side]+="$s " cpu[$side]+="$c "
    rm -f "$log" "$times"
  done
done
echo
for side in old new; do
  echo "median $side: $(printf '%s\n' ${took[$side]} | median) s, CPU $(printf '%s\n' ${cpu[$side]} | median) s"
done
