#!/usr/bin/env bash
# build.sh - build (or reuse) the real Kubernetes binaries the test bed runs.
#
# The binaries come from the Go module proxy through the wrapper module next to
# this script (never from k8s.io/kubernetes in the main go.mod). They are cached
# by their pin under ${XDG_CACHE_HOME:-~/.cache}/cgpilot/k8s-bins/ as
# hack/buildcache/cache.sh says: rebuilt only when the pin, this script or Go
# changes. Prints the directory on stdout.
#
#   build.sh            build everything (apiserver, etcd, controller-manager, scheduler, kubectl, kubelet)
#   build.sh --check    print the directory if it is complete, exit 1 otherwise
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
. ../../hack/buildcache/cache.sh
cache_who=k8sbins
cache_need_go

V=$(cache_pin k8s.io/kubernetes); V=${V#v}
MINOR=$(echo "$V" | cut -d. -f2)
cache_dir=$cache_root/k8s-bins/$(cache_key go.mod go.sum build.sh)
cache_bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet"
cache_out=$cache_dir
cache_reuse "$@"

LDV="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDV="$LDV -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
cache_begin "Kubernetes v$V binaries" "about 10-20 min on 2 cores"
for t in go.etcd.io/etcd/server/v3:etcd \
         k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver \
         k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager \
         k8s.io/kubernetes/cmd/kube-scheduler:kube-scheduler \
         k8s.io/kubernetes/cmd/kubectl:kubectl \
         k8s.io/kubernetes/cmd/kubelet:kubelet; do
  pkg=${t%%:*}; out=${t##*:}
  cache_step "$out" "$pkg" go build -mod=readonly -trimpath -ldflags="$LDV" -o "$cache_tmp/$out" "$pkg"
done
echo "v$V" > "$cache_tmp/VERSION"
cache_commit
