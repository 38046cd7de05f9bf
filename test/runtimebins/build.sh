#!/usr/bin/env bash
# build.sh - build (or reuse) the container runtime the test bed's node runs:
# containerd, containerd-shim-runc-v2 and ctr (containerd 2) and runc.
#
# They come from the Go module proxy through the wrapper module next to this
# script (the upstream modules at the pins in go.mod; nothing of them is
# copied into cgpilot). They are cached under
# ${XDG_CACHE_HOME:-~/.cache}/cgpilot/runtime-bins/<key>, where the key hashes
# this module's go.mod and go.sum, this script and the Go version: they are
# rebuilt only when a pin changes. Prints the directory on stdout.
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
command -v go >/dev/null || { echo "runtimebins: go not found: install Go 1.26 (see README)" >&2; exit 2; }

CV=$(awk '$1=="github.com/containerd/containerd/v2" && $2 ~ /^v/ {print $2; exit}' go.mod)
RV=$(awk '$1=="github.com/opencontainers/runc" && $2 ~ /^v/ {print $2; exit}' go.mod)
[ -n "$CV" ] && [ -n "$RV" ] || { echo "runtimebins: no containerd or runc pin in $here/go.mod" >&2; exit 2; }
BINS="containerd containerd-shim-runc-v2 ctr runc"
key=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)-$(go env GOVERSION)
base=${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/runtime-bins
dir=$base/$key

complete() { for b in $BINS; do [ -x "$dir/$b" ] || return 1; done; }
if complete; then echo "$dir"; exit 0; fi
[ "${1:-}" = --check ] && exit 1

# One builder at a time: parallel `make` jobs or two test runs must not race.
mkdir -p "$base"
exec 9>"$base/.lock"
if ! flock -n 9; then
  echo "runtimebins: another build is running; waiting for it" >&2
  flock 9
fi
if complete; then echo "$dir"; exit 0; fi

pkg-config --exists libseccomp 2>/dev/null ||
  { echo "runtimebins: runc needs libseccomp: run make deps (apt-get install libseccomp-dev pkg-config gcc)" >&2; exit 1; }

tmp=$dir.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
echo "runtimebins: building containerd $CV and runc $RV into $dir (cold: a few minutes on 2 cores)" >&2
start=$(date +%s)
# The versions go where the binaries report them (containerd --version,
# ctr version, runc --version), as upstream's Makefiles set them.
CLD="-s -w -X github.com/containerd/containerd/v2/version.Version=$CV"
for t in containerd ctr containerd-shim-runc-v2; do
  s=$(date +%s)
  echo "runtimebins: [$t] building github.com/containerd/containerd/v2/cmd/$t ..." >&2
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$CLD" -o "$tmp/$t" "github.com/containerd/containerd/v2/cmd/$t"
  echo "runtimebins: [$t] done in $(( $(date +%s) - s ))s ($(du -h "$tmp/$t" | cut -f1))" >&2
done
# runc: cgo (nsenter, seccomp); upstream's default tags minus libpathrs (a
# Rust library Debian does not ship).
s=$(date +%s)
echo "runtimebins: [runc] building github.com/opencontainers/runc ..." >&2
CGO_ENABLED=1 go build -mod=readonly -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
  -ldflags="-s -w -X main.version=${RV#v}" -o "$tmp/runc" github.com/opencontainers/runc
echo "runtimebins: [runc] done in $(( $(date +%s) - s ))s ($(du -h "$tmp/runc" | cut -f1))" >&2
printf 'containerd %s\nrunc %s\n' "$CV" "$RV" > "$tmp/VERSION"
rm -rf "$dir"; mv "$tmp" "$dir"
# Older keys are dead weight.
for old in "$base"/*; do [ "$old" = "$dir" ] || [ ! -d "$old" ] || rm -rf "$old"; done
echo "runtimebins: all binaries built in $(( $(date +%s) - start ))s" >&2
echo "$dir"
