#!/usr/bin/env bash
# A/B two capdir binaries on the one-row rebuild, side by side in one run: one generated
# catalogue, one site; each round edits one row, commits, and lets one binary change the site
# in place, taking turns, so the machine's noise falls on both alike. Prints each rebuild's
# wall time, the CPU it used (user + system) and its open/apply/pages steps (RUST_LOG=info),
# then the medians.
#   bench/rebuild_ab.sh OLD_BINARY NEW_BINARY [ROWS] [ROUNDS]   (default 10000 rows, 5 rounds)
#   FULL=1          full builds instead: each round each binary builds the catalogue into a
#                   directory that did not exist (no edit), with its history and pages steps
#   BENCH_OUT=DIR   where the catalogue lives (default /dev/shm/capdir-rebuild: tmpfs, as
#                   bench/build.sh's figures against Hugo)
# Each binary keeps a site of its own (built by it first), so the two may keep their caches in
# different formats; each round's one edit is the one change either site has to take in.
set -euo pipefail
cd "$(dirname "$0")/.."
old="$(realpath "$1")" new="$(realpath "$2")" rows="${3:-10000}" rounds="${4:-5}"
dir="${BENCH_OUT:-/dev/shm/capdir-rebuild}/$rows"
[ -d "$dir/catalogue" ] || python3 bench/gen_catalogue.py "$dir" "$rows" "$((rows / 10))" 1 >/dev/null
site="$dir/site-ab-$$" full="${FULL:-}"
sites=("$site-old" "$site-new")
trap 'rm -rf "${sites[@]}"' EXIT
if [ -z "$full" ]; then
  for side in old new; do
    (cd "$dir" && "${!side}" build catalogue --out "$site-$side") >/dev/null 2>&1
  done
fi
file=$(find "$dir/catalogue" -name '*.yaml' -print -quit)
source bench/median.sh
step() { grep -oP "^  $1 +\K[0-9.]+" "$2"; }
declare -A took cpu
if [ -n "$full" ]; then
  echo "| round | binary | build s | CPU s | history ms | pages ms |"
  echo "|---|---|---|---|---|---|"
else
  echo "| round | binary | rebuild s | CPU s | open ms | apply ms | pages ms |"
  echo "|---|---|---|---|---|---|---|"
fi
for r in $(seq "$rounds"); do
  if [ -z "$full" ]; then
    sed -i "s/^\(  # OUTPUT: .*\)\( (edit [0-9a-z-]*)\)\?$/\1 (edit $$-$r)/" "$file"
    git -C "$dir" -c user.name=B -c user.email=b@example.com commit -qam "edit $r"
  fi
  for side in old new; do
    bin="${!side}" out="$site-$side"
    if [ -n "$full" ]; then
      out="$site-$r-$side"
      sites+=("$out")
      sync
    fi
    log="$(mktemp)" times="$(mktemp)"
    start=$(date +%s.%N)
    (cd "$dir" && RUST_LOG=info /usr/bin/time -o "$times" -f "%U %S" "$bin" build catalogue --out "$out") >"$log" 2>&1
    s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.3f}')")
    c=$(awk '{printf "%.2f", $1 + $2}' "$times")
    if [ -n "$full" ]; then
      grep -q "^built $rows rows" "$log" || { echo "$side did not build:"; cat "$log"; exit 1; }
      echo "| $r | $side | $s | $c | $(step history "$log") | $(step pages "$log") |"
    else
      grep -q "^changed 1 rows of .* in place" "$log" || { echo "$side did not change the site in place:"; cat "$log"; exit 1; }
      echo "| $r | $side | $s | $c | $(step open "$log") | $(step apply "$log") | $(step pages "$log") |"
    fi
    took[$side]+="$s " cpu[$side]+="$c "
    rm -f "$log" "$times"
  done
done
echo
for side in old new; do
  echo "median $side: $(printf '%s\n' ${took[$side]} | median) s, CPU $(printf '%s\n' ${cpu[$side]} | median) s"
done
