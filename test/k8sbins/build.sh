#!/usr/bin/env bash
# build.sh - build (or reuse) the real Kubernetes binaries the test bed runs.
#
# The binaries come from the Go module proxy through the wrapper module next to
# this script (never from k8s.io/kubernetes in the main go.mod). They are cached
# under ${XDG_CACHE_HOME:-~/.cache}/cgpilot/k8s-bins/<key>, where the key hashes
# this module's go.mod and go.sum, this script and the Go version: the binaries
# are rebuilt only when the pin changes. Prints the directory on stdout.
#
#   build.sh            build everything (apiserver, etcd, controller-manager, scheduler, kubectl, kubelet)
#   build.sh --check    print the directory if it is complete, exit 1 otherwise
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
command -v go >/dev/null || { echo "k8sbins: go not found: install Go 1.26 (see README)" >&2; exit 2; }

V=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' go.mod); V=${V#v}
MINOR=$(echo "$V" | cut -d. -f2)
BINS="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet"
key=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)-$(go env GOVERSION)
base=${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/k8s-bins
dir=$base/$key

complete() { for b in $BINS; do [ -x "$dir/$b" ] || return 1; done; }
if complete; then echo "$dir"; exit 0; fi
[ "${1:-}" = --check ] && exit 1

# One builder at a time: parallel `make` jobs or two test runs must not race.
mkdir -p "$base"
exec 9>"$base/.lock"
if ! flock -n 9; then
  echo "k8sbins: another build is running; waiting for it" >&2
  flock 9
fi
if complete; then echo "$dir"; exit 0; fi

LDV="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDV="$LDV -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
tmp=$dir.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
echo "k8sbins: building Kubernetes v$V binaries into $dir (cold: about 10-20 min on 2 cores)" >&2
start=$(date +%s)
for t in go.etcd.io/etcd/server/v3:etcd \
         k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver \
         k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager \
         k8s.io/kubernetes/cmd/kube-scheduler:kube-scheduler \
         k8s.io/kubernetes/cmd/kubectl:kubectl \
         k8s.io/kubernetes/cmd/kubelet:kubelet; do
  pkg=${t%%:*}; out=${t##*:}
  s=$(date +%s)
  echo "k8sbins: [$out] building $pkg ..." >&2
  go build -mod=readonly -trimpath -ldflags="$LDV" -o "$tmp/$out" "$pkg"
  echo "k8sbins: [$out] done in $(( $(date +%s) - s ))s ($(du -h "$tmp/$out" | cut -f1))" >&2
done
echo "v$V" > "$tmp/VERSION"
rm -rf "$dir"; mv "$tmp" "$dir"
# Older keys are dead weight (~400 MB each).
for old in "$base"/*; do [ "$old" = "$dir" ] || [ ! -d "$old" ] || rm -rf "$old"; done
echo "k8sbins: all binaries built in $(( $(date +%s) - start ))s" >&2
echo "$dir"
