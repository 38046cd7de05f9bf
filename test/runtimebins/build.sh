#!/usr/bin/env bash
# build.sh - build (or reuse) the container runtime the test bed's node runs:
# containerd, containerd-shim-runc-v2 and ctr (containerd 2) and runc.
#
# They come from the Go module proxy through the wrapper module next to this
# script (the upstream modules at the pins in go.mod; nothing of them is
# copied into cgpilot). They are cached by their pin under
# ${XDG_CACHE_HOME:-~/.cache}/cgpilot/runtime-bins/ as
# hack/buildcache/cache.sh says: rebuilt only when a pin, this script or Go
# changes. Prints the directory on stdout.
#
# runc needs cgo and libseccomp (Debian: gcc, libc6-dev, pkg-config,
# libseccomp-dev; hack/deps.sh installs them). containerd and its tools are
# built without cgo (so without the btrfs snapshotter, which the node does
# not use).
#
#   build.sh            build them (cold: a few minutes on 2 cores), or reuse them
#   build.sh --check    print the directory if it is complete, exit 1 otherwise
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
. ../../hack/buildcache/cache.sh
cache_who=runtimebins
cache_need_go

CV=$(cache_pin github.com/containerd/containerd/v2)
RV=$(cache_pin github.com/opencontainers/runc)
cache_dir=$cache_root/runtime-bins/$(cache_key go.mod go.sum build.sh)
cache_bins="containerd containerd-shim-runc-v2 ctr runc"
cache_out=$cache_dir
cache_reuse "$@"

pkg-config --exists libseccomp 2>/dev/null ||
  { echo "runtimebins: runc needs libseccomp: run make deps (apt-get install libseccomp-dev pkg-config gcc)" >&2; exit 1; }

cache_begin "containerd $CV and runc $RV" "a few minutes on 2 cores"
# The versions go where the binaries report them (containerd --version,
# ctr version, runc --version), as upstream's Makefiles set them.
CLD="-s -w -X github.com/containerd/containerd/v2/version.Version=$CV"
for t in containerd ctr containerd-shim-runc-v2; do
  cache_step "$t" "github.com/containerd/containerd/v2/cmd/$t" \
    env CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$CLD" -o "$cache_tmp/$t" "github.com/containerd/containerd/v2/cmd/$t"
done
# runc: cgo (nsenter, seccomp); upstream's default tags minus libpathrs (a
# Rust library Debian does not ship).
cache_step runc github.com/opencontainers/runc \
  env CGO_ENABLED=1 go build -mod=readonly -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
  -ldflags="-s -w -X main.version=${RV#v}" -o "$cache_tmp/runc" github.com/opencontainers/runc
printf 'containerd %s\nrunc %s\n' "$CV" "$RV" > "$cache_tmp/VERSION"
cache_commit
