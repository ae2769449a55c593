#!/usr/bin/env bash
# Benchmark `capdir build` against Hugo rendering the same contracts as pages, side by side on
# the same machine in the same run. Prints a markdown table per size: ROUNDS full builds of
# each, taking turns, the median ratio, then the rebuild after one row is edited.
#   bench/build.sh [ROWS...]    (default: 10000; ROUNDS=3 by default; ROWS_PER_COMMIT=1)
#
# Every timed build writes into a directory that did not exist, and nothing is deleted
# between them: on ext4 without a journal (this machine's disk) the kernel passes over inodes
# freed in the last minutes, one by one, when it allocates new ones (fs/ext4/ialloc.c,
# recently_deleted), so a build right after deleting a previous site took anywhere from 3 to
# 12 s on the same input, and Hugo's time swung the same way. The outputs are removed at the
# end; give the disk some minutes before the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hugo >/dev/null || { echo "needs hugo (apt-get install hugo)"; exit 1; }
cargo build --release --quiet
CAPDIR="$PWD/target/release/capdir"
OUT="${BENCH_OUT:-/tmp/capdir-bench}"
ROUNDS="${ROUNDS:-3}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000)
run="run-$$"
cleanup=()
trap 'for d in "${cleanup[@]}"; do rm -rf "$d"; done' EXIT

peak() { /usr/bin/time -f "%e %M" "$@" 2>&1 >/dev/null | tail -1; }   # seconds, peak KiB
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

for n in "${sizes[@]}"; do
  dir="$OUT/$n"
  if [ ! -d "$dir/catalogue" ]; then
    python3 bench/gen_catalogue.py "$dir" "$n" "$((n / 10))" "${ROWS_PER_COMMIT:-1}" >/dev/null
  fi
  commits=$(git -C "$dir" rev-list --count HEAD)
  echo
  echo "$n rows, $commits commits:"
  echo
  echo "| round | capdir build s | capdir peak MiB | hugo s | hugo peak MiB | capdir/hugo |"
  echo "|---|---|---|---|---|---|"
  ratios=()
  for r in $(seq "$ROUNDS"); do
    site="$dir/site-$run-$r" public="$dir/hugo/public-$run-$r"
    cleanup+=("$site" "$public")
    # Each timed command starts with the disk settled, so none pays for another's writeback.
    sync
    read -r cs cm < <(cd "$dir" && peak "$CAPDIR" build catalogue --out "$site")
    sync
    read -r hs hm < <(cd "$dir/hugo" && peak hugo --quiet --destination "$public")
    ratio=$(python3 -c "print(f'{$cs / $hs:.2f}')")
    ratios+=("$ratio")
    echo "| $r | $cs | $((cm / 1024)) | $hs | $((hm / 1024)) | $ratio |"
  done
  # One row changes and is committed; build again over the last site.
  f=$(find "$dir/catalogue" -name '*.yaml' -print -quit)
  sed -i 's/# OUTPUT: text/# OUTPUT: text, edited/' "$f"
  git -C "$dir" -c user.name=B -c user.email=b@example.com commit -qam "edit one row"
  sync
  read -r rs rm_ < <(cd "$dir" && peak "$CAPDIR" build catalogue --out "$site")
  echo
  echo "median capdir/hugo: $(printf '%s\n' "${ratios[@]}" | median) (target: at most 1)"
  echo "rebuild after one row is edited: $rs s, peak $((rm_ / 1024)) MiB"
done
