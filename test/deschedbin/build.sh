#!/usr/bin/env bash
# build.sh - build (or reuse) the upstream descheduler the rescheduling tests run.
#
# It comes from the Go module proxy through the wrapper module next to this
# script (the upstream module, at the pin in go.mod; nothing of it is copied
# into cgpilot). It is cached by its pin under
# ${XDG_CACHE_HOME:-~/.cache}/cgpilot/descheduler/ as hack/buildcache/cache.sh
# says: rebuilt only when the pin, this script or Go changes. Prints the
# binary's path on stdout.
#
#   build.sh            build it (cold: a few minutes on 2 cores), or reuse it
#   build.sh --check    print the path if it is built, exit 1 otherwise
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
. ../../hack/buildcache/cache.sh
cache_who=deschedbin
cache_need_go

V=$(cache_pin sigs.k8s.io/descheduler)
cache_dir=$cache_root/descheduler/$(cache_key go.mod go.sum build.sh)
cache_bins=descheduler
cache_out=$cache_dir/descheduler
cache_reuse "$@"

cache_begin "descheduler $V" "about 3-5 min on 2 cores"
# Static, as upstream's Makefile builds it; the version as its ldflags set it.
cache_step descheduler sigs.k8s.io/descheduler/cmd/descheduler \
  env CGO_ENABLED=0 go build -mod=readonly -trimpath \
  -ldflags="-s -w -X sigs.k8s.io/descheduler/pkg/version.version=$V -X sigs.k8s.io/descheduler/pkg/version.buildDate=1970-01-01T00:00:00Z" \
  -o "$cache_tmp/descheduler" sigs.k8s.io/descheduler/cmd/descheduler
echo "$V" > "$cache_tmp/VERSION"
cache_commit
