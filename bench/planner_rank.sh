#!/usr/bin/env bash
# Does `planner_rank` cost search quality? Every `asks` line of the bundled catalogue is a
# labelled query for its row; `capdir eval` scores them on the catalogue as it is, and on a copy
# with every `planner_rank` taken out (all rows at the default 100, so no row is weighed).
# Prints both rows of figures side by side. (The MetaTool catalogue sets no planner_rank: its
# figures are the same either way, and CI's floor checks them.)
#   bench/planner_rank.sh        (needs python3 with PyYAML)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin capdir
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - catalogue "$work/queries.jsonl" <<'PY'
import json, pathlib, sys, yaml
out = open(sys.argv[2], "w")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.yaml")):
    row = yaml.safe_load(path.read_text())
    for ask in row.get("asks") or []:
        out.write(json.dumps({"query": ask, "keys": [row["key"]]}) + "\n")
PY
mkdir "$work/flat"
for f in catalogue/*.yaml; do
  grep -v '^planner_rank:' "$f" > "$work/flat/$(basename "$f")"
done
echo "$(wc -l < "$work/queries.jsonl") asks of $(ls catalogue/*.yaml | wc -l) rows; rows with a planner_rank: $(grep -l '^planner_rank:' catalogue/*.yaml | xargs -n1 basename | sed 's/.yaml//' | paste -sd, -)"
echo
echo "| catalogue | recall@1 | recall@5 | MRR@12 |"
echo "|---|---|---|---|"
for variant in as-is flat; do
  dir=catalogue
  [[ $variant == flat ]] && dir="$work/flat"
  target/release/capdir build "$dir" --out "$work/site-$variant" >/dev/null 2>&1
  target/release/capdir eval --queries "$work/queries.jsonl" --site "$work/site-$variant" --json \
    | python3 -c "import json,sys; f=json.load(sys.stdin); print(f'| {sys.argv[1]} | {f[\"recall_at_1\"]:.3f} | {f[\"recall_at_5\"]:.3f} | {f[\"mrr_at_12\"]:.3f} |')" \
      "$([[ $variant == flat ]] && echo 'every planner_rank taken out' || echo 'as it is')"
done
