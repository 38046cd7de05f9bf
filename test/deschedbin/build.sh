#!/usr/bin/env bash
# build.sh - build (or reuse) the upstream descheduler the rescheduling tests run.
#
# It comes from the Go module proxy through the wrapper module next to this
# script (the upstream module, at the pin in go.mod; nothing of it is copied
# into cgpilot). It is cached under
# ${XDG_CACHE_HOME:-~/.cache}/cgpilot/descheduler/<key>, where the key hashes
# this module's go.mod and go.sum, this script and the Go version: it is
# rebuilt only when the pin changes. Prints the binary's path on stdout.
#
#   build.sh            build it (cold: a few minutes on 2 cores), or reuse it
#   build.sh --check    print the path if it is built, exit 1 otherwise
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
command -v go >/dev/null || { echo "deschedbin: go not found: install Go 1.26 (see README)" >&2; exit 2; }

V=$(awk '$1=="sigs.k8s.io/descheduler"{print $2; exit}' go.mod)
[ -n "$V" ] || { echo "deschedbin: no sigs.k8s.io/descheduler pin in $here/go.mod" >&2; exit 2; }
key=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)-$(go env GOVERSION)
base=${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/descheduler
dir=$base/$key
bin=$dir/descheduler

if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
[ "${1:-}" = --check ] && exit 1

# One builder at a time: two test runs must not race.
mkdir -p "$base"
exec 9>"$base/.lock"
if ! flock -n 9; then
  echo "deschedbin: another build is running; waiting for it" >&2
  flock 9
fi
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$dir.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
echo "deschedbin: building descheduler $V into $dir (cold: about 3-5 min on 2 cores)" >&2
start=$(date +%s)
# Static, as upstream's Makefile builds it; the version as its ldflags set it.
CGO_ENABLED=0 go build -mod=readonly -trimpath \
  -ldflags="-s -w -X sigs.k8s.io/descheduler/pkg/version.version=$V -X sigs.k8s.io/descheduler/pkg/version.buildDate=1970-01-01T00:00:00Z" \
  -o "$tmp/descheduler" sigs.k8s.io/descheduler/cmd/descheduler
echo "$V" > "$tmp/VERSION"
rm -rf "$dir"; mv "$tmp" "$dir"
for old in "$base"/*; do [ "$old" = "$dir" ] || [ ! -d "$old" ] || rm -rf "$old"; done
echo "deschedbin: built in $(( $(date +%s) - start ))s ($(du -h "$bin" | cut -f1))" >&2
echo "$bin"
