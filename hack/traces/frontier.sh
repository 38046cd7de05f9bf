#!/usr/bin/env bash
# frontier.sh - regenerate the replay frontier (CSV + SVG per trace) and the
# gap-closure table (docs/frontier/gap.md) that README.md and
# recommend/FRONTIER.md show, from the traces in ../shared/data (Bitbrains in
# ../shared/data/traces; hack/traces/fetch.sh converts the public sources).
#
#   hack/traces/frontier.sh [OUT_DIR]   # default docs/frontier
#
# Step 1 h, warmup 24 h. Google and Azure are replayed whole; the two
# Bitbrains months on every BITBRAINS_EVERY-th series (default 5: 100 of
# their 500 VMs, the trace name gets -every5), which keeps the whole run
# to about 40 minutes on the 2 shared, loaded cores here and the budgeted bound's working
# set under 1 GB. WORKERS (default 2) replays series in parallel.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-docs/frontier}
data=${CGPILOT_SHARED_DATA:-../shared/data}
every=${BITBRAINS_EVERY:-5}
workers=${WORKERS:-2}
bin=$(mktemp -d)/cgpilotctl
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/cgpilotctl
mkdir -p "$out"
gap=$out/gap.md
{
  echo "| trace | resource | policy | slack | violations | resizes/day | ×VPA's curve | **G** | VPA slack / violations | bound (family: per-series blocks, ≤ 1 counted change/series/day; its resizes) | note |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} > "$gap.tmp"
for t in google2019-sample azure2017-sample bitbrains-2013-07 bitbrains-2013-08; do
  f=$data/traces/$t.csv.gz
  [ -f "$f" ] || f=$data/$t/$t.csv.gz
  if [ ! -f "$f" ]; then
    echo "frontier.sh: $f missing (bitbrains: ../shared/data/traces; others: hack/traces/fetch.sh)" >&2
    exit 1
  fi
  name=$t n=1
  case $t in bitbrains-*) n=$every; [ "$n" -gt 1 ] && name=$t-every$n ;; esac
  echo "frontier.sh: $name ..." >&2
  "$bin" replay --trace "$f" --every "$n" --sweep --sweep-out "$out" --workers "$workers" --quiet > "$out/$name.txt"
  cat "$out/$name.txt"
  cat "$out/$name.gap.md" >> "$gap.tmp"
  rm -f "$out/$name.gap.md"
done
mv "$gap.tmp" "$gap"
echo "frontier.sh: $gap"
