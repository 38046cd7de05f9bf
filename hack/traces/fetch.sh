#!/usr/bin/env bash
# fetch.sh - convert the public Google 2019 and Azure 2017 trace samples into
# replay traces in ../shared/data/<name>/ (with SHA256SUMS and the converter's
# report). Nothing converted is committed: only this script, the raw inputs'
# checksums (hack/traces/SOURCES) and the provenance notes.
#
#   hack/traces/fetch.sh [SRC_DIR]
#
# SRC_DIR (default ~/.cache/cgpilot/traces/src) holds one checkout per source,
# at the commits named in SOURCES:
#   SRC_DIR/google2019 = github.com/muse-research-lab/cloud-traces-comparison
#   SRC_DIR/azure2017  = github.com/carlonlv/DataCenterSim
# A missing checkout is cloned with git when the network allows it (a
# machine without network needs the checkout copied in; the session tools'
# snapshot of the repository works). traceconv checks every raw file's
# SHA-256 against SOURCES before converting, and writes nothing on a mismatch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
src=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/traces/src}
data=${CGPILOT_SHARED_DATA:-../shared/data}
declare -A repo=([google2019]=muse-research-lab/cloud-traces-comparison [azure2017]=carlonlv/DataCenterSim)
for name in google2019 azure2017; do
  dir=$src/$name
  commit=$(sed -n "s|^# $name: *github.com/${repo[$name]} at ||p" hack/traces/SOURCES)
  if [ ! -d "$dir" ]; then
    git clone --quiet "https://github.com/${repo[$name]}" "$dir" ||
      { echo "fetch.sh: cannot clone ${repo[$name]}: put a checkout at $commit into $dir" >&2; exit 1; }
    git -C "$dir" checkout --quiet "$commit"
  fi
  out=$data/$name-sample
  mkdir -p "$out"
  go run ./test/cmd/traceconv "$name" --src "$dir" --out "$out/$name-sample.csv.gz" --report "$out/$name-sample.convert-report.json"
  (cd "$out" && sha256sum "$name-sample.csv.gz" > SHA256SUMS)
  echo "fetch.sh: $out/$name-sample.csv.gz"
done
