#!/usr/bin/env bash
# Benchmark `capdir build` against Hugo rendering the same contracts as pages, side by side on
# the same machine in the same run. Prints a markdown table.
#   bench/build.sh [ROWS...]    (default: 10000)
#
# Every timed command writes into a directory that did not exist, and nothing is deleted
# between them: on ext4 without a journal (this machine's disk) the kernel passes over inodes
# freed in the last minutes when it allocates new ones (fs/ext4/ialloc.c, recently_deleted),
# so a build right after deleting a previous site took anywhere from 3 to 12 s on the same
# input. The outputs are removed at the end; give the disk some minutes before the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hugo >/dev/null || { echo "needs hugo (apt-get install hugo)"; exit 1; }
cargo build --release --quiet
CAPDIR="$PWD/target/release/capdir"
OUT="${BENCH_OUT:-/tmp/capdir-bench}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000)
run="run-$$"
cleanup=()
trap 'for d in "${cleanup[@]}"; do rm -rf "$d"; done' EXIT

peak() { /usr/bin/time -f "%e %M" "$@" 2>&1 >/dev/null | tail -1; }   # seconds, peak KiB

echo "| rows | commits | capdir build s | capdir peak MiB | hugo s | hugo peak MiB | capdir/hugo | rebuild after 1 edit s |"
echo "|---|---|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  dir="$OUT/$n"
  if [ ! -d "$dir/catalogue" ]; then
    python3 bench/gen_catalogue.py "$dir" "$n" "$((n / 10))" >/dev/null
  fi
  site="$dir/site-$run" public="$dir/hugo/public-$run"
  cleanup+=("$site" "$public")
  # Each timed command starts with the disk settled, so none pays for another's writeback.
  sync
  commits=$(git -C "$dir" rev-list --count HEAD)
  read -r cs cm < <(cd "$dir" && peak "$CAPDIR" build catalogue --out "$site")
  sync
  read -r hs hm < <(cd "$dir/hugo" && peak hugo --quiet --destination "$public")
  # One row changes and is committed; build again over the site just built.
  f=$(find "$dir/catalogue" -name '*.yaml' -print -quit)
  sed -i 's/# OUTPUT: text/# OUTPUT: text, edited/' "$f"
  git -C "$dir" -c user.name=B -c user.email=b@example.com commit -qam "edit one row"
  sync
  read -r rs _ < <(cd "$dir" && peak "$CAPDIR" build catalogue --out "$site")
  ratio=$(python3 -c "print(f'{$cs / $hs:.2f}')")
  echo "| $n | $commits | $cs | $((cm / 1024)) | $hs | $((hm / 1024)) | $ratio | $rs |"
done
