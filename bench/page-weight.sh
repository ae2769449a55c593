#!/usr/bin/env bash
# Page weights of the built site: the bytes a browser fetches for the index and for row pages
# (HTML + CSS + JS; no images or fonts exist), raw and gzipped, plus the search index that
# loads on the first search. Prints a markdown table.
#   bench/page-weight.sh [CATALOGUE] [ROW_KEY...]   (default: catalogue, three bundled rows)
set -euo pipefail
cd "$(dirname "$0")/.."
catalogue="${1:-catalogue}"
shift || true
rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=(WEATHER_CURRENT_TEMPERATURE GITHUB_CREATE_ISSUE ECHO)
site="$(mktemp -d)/site"
cargo run --quiet -- build "$catalogue" --out "$site" 2>/dev/null

bytes() { wc -c <"$1" | tr -d ' '; }
gz() { gzip -9 -c "$1" | wc -c | tr -d ' '; }
css="$site/static/style.css"
search_js="$site/static/search.js"
row_js="$site/static/row.js"

echo "| page | HTML | CSS | JS | total | total gzipped |"
echo "|---|---|---|---|---|---|"
line() {  # name html js...
  local name="$1" html="$2"; shift 2
  local js=0 jsgz=0
  for f in "$@"; do js=$((js + $(bytes "$f"))); jsgz=$((jsgz + $(gz "$f"))); done
  local h c
  h=$(bytes "$html"); c=$(bytes "$css")
  echo "| $name | $h | $c | $js | $((h + c + js)) | $(($(gz "$html") + $(gz "$css") + jsgz)) |"
}
line "index.html" "$site/index.html" "$search_js"
for k in "${rows[@]}"; do
  line "k/$k.html" "$site/k/$k.html" "$search_js" "$row_js"
done
line "search.html (no-JS list)" "$site/search.html" "$search_js"
echo
echo "search.json (fetched on the first search, then cached): $(bytes "$site/search.json") bytes, $(gz "$site/search.json") gzipped; $(grep -o '\],\[' "$site/search.json" | wc -l | awk '{print $1 + 1}') rows"
rm -rf "$(dirname "$site")"
