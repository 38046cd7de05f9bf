#!/usr/bin/env bash
# frontier.sh - regenerate the replay frontier (CSV + SVG per trace) that
# README.md and recommend/FRONTIER.md show, from the traces in
# ../shared/data/traces (hack/traces/fetch.sh converts the new sources).
#
#   hack/traces/frontier.sh [OUT_DIR]   # default docs/frontier
#
# Full traces, step 1 h, warmup 24 h; about 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-docs/frontier}
data=${CGPILOT_SHARED_DATA:-../shared/data}
bin=$(mktemp -d)/cgpilotctl
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/cgpilotctl
mkdir -p "$out"
for t in bitbrains-2013-07 bitbrains-2013-08 google2019-sample azure2017-sample; do
  f=$data/traces/$t.csv.gz
  [ -f "$f" ] || f=$data/$t/$t.csv.gz
  if [ ! -f "$f" ]; then
    echo "frontier.sh: $f missing (bitbrains: ../shared/data/traces; others: hack/traces/fetch.sh)" >&2
    exit 1
  fi
  "$bin" replay --trace "$f" --sweep --sweep-out "$out" --workers 2 --quiet > "$out/$t.txt"
  cat "$out/$t.txt"
done
