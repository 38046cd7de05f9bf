#!/usr/bin/env bash
# tool.sh - build (or reuse) a pinned Go tool and print its path.
#
#   hack/tool.sh controller-gen     CRDs and deepcopy from api/ (make generate)
#   hack/tool.sh helm               the chart in deploy/helm (make lint, test/deploy)
#   hack/tool.sh staticcheck        make lint
#
# Each tool is built from the Go module proxy at the version pinned below
# (never "latest") into ${XDG_CACHE_HOME:-~/.cache}/cgpilot/tools/<name>-<version>/,
# cached as hack/buildcache/cache.sh says, like the Kubernetes binaries of
# test/k8sbins: a warm call only checks that the binary is there. A cold build
# prints its progress on stderr. Only the path goes to stdout, so callers
# write "$(hack/tool.sh helm) template ...".
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/buildcache/cache.sh"
cache_who=tool

usage() { echo "usage: $0 controller-gen|helm|staticcheck" >&2; exit 2; }
[ $# = 1 ] || usage
name=$1
case $name in
  # v0.21 is the controller-tools line built against k8s.io 0.36, our client-go.
  controller-gen)
    version=v0.21.0
    pkg=sigs.k8s.io/controller-tools/cmd/controller-gen
    ldflags="-s -w" ;;
  # Helm 4; the ldflags set what `helm version` reports, as its own Makefile does.
  helm)
    version=v4.3.1
    pkg=helm.sh/helm/v4/cmd/helm
    ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean" ;;
  staticcheck)
    version=v0.8.2
    pkg=honnef.co/go/tools/cmd/staticcheck
    ldflags="-s -w" ;;
  *) usage ;;
esac
cache_need_go

cache_dir=$cache_root/tools/$name-$version
cache_bins=$name
cache_out=$cache_dir/$name
# The tools share one directory: one builder per tool, and a build deletes
# only its own tool's other versions.
cache_lock=$cache_root/tools/.$name.lock
cache_siblings=$name-
cache_reuse

cache_begin "$name $version" "a few minutes on 2 cores"
# go install -v names each package as it is compiled: print every 20th as
# progress, so a long build is visibly moving without flooding the log.
log=$cache_tmp/build.log
set +e
GOBIN=$cache_tmp CGO_ENABLED=0 GOFLAGS=-mod=mod go install -v -trimpath -ldflags="$ldflags" "$pkg@$version" 2>&1 |
  tee "$log" | awk -v n="$name" '{ c++ } c % 20 == 0 { printf "tool: %s: %d packages compiled (now %s)\n", n, c, $0 > "/dev/stderr"; fflush("/dev/stderr") }'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ] || [ ! -x "$cache_tmp/$name" ]; then
  echo "tool: building $name $version failed (exit $rc); last lines:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
rm -f "$log"
cache_commit
