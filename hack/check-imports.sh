#!/usr/bin/env bash
# check-imports.sh - enforce cgpilot's package walls (run by make lint, and
# so by CI). Each rule names who may import what; a violation names the
# importer. The layout they protect:
#
#   internal/*          leaf helpers (cpulist, atomicfile): the standard
#                       library and k8s.io/utils/cpuset only
#   topology, cgroup,   libraries: no k8s.io/* but k8s.io/utils/cpuset, none
#   recommend           of each other, api, agent or cmd (tests included)
#   api/local           the node-local protocol: no client-go, no k8s.io/*
#                       but cpuset, no cgpilot package but internal/*
#   api/report          the agent-to-aggregator wire contract: no k8s.io/*,
#                       no cgpilot package but recommend and internal/*
#   api/v1alpha1        the cluster API types: k8s.io/apimachinery only
#   agent/pools         the CPU pools: no client-go, no k8s.io/* but cpuset;
#                       cgroup, topology, api/local, internal/*
#   agent/rightsize,    right-sizing: the same walls as agent/pools
#   agent/collector,    (decisions, sampling and history know no
#   agent/history       client-go); recommend and oomwatch allowed
#   agent/oomwatch      no k8s.io/*; cgroup and internal/* only
#   agent               wires everything; only cmd/* and test/* import it,
#                       and no sub-package of agent imports agent itself
#   aggregator/...      the cluster aggregator: never imports agent (agents
#                       and the aggregator meet in api/*). Its rooms:
#     state, analysis,  the merge and the analysis: no k8s.io/*; api/report,
#     profile, auth,    recommend, internal/* and each other as layered
#     web               (web reads state, analysis, profile)
#     ingest            the agent API: no client-go (auth's interface only)
#     extender, webhook k8s.io/api types, no client-go
#     kube              the one room that talks to the API server (client-go)
#                       besides the wiring; it imports no HTTP room
#   cmd/cgpilotctl      must not link client-go (it talks to the socket)
#   cmd/cgpilot-agent   must not link client-go's clientset, discovery or
#                       informer factories (agent/kube says why); only
#                       tests import agent/kube/kubetest
#
# Also: every package has a package doc comment, and every .go file that
# touches /sys, /proc or cgroupfs requires linux in its build constraint.
#
# Prints every violation and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mod=$(go list -m)
fail=0
violation() { echo "check-imports: $*" >&2; fail=1; }

# go list -test names test variants "pkg [pkg.test]"; the rules are about pkg.
strip_variants() { sed -E 's/ \[[^]]*\]//g'; }

# deps_rule NAME PATTERN FORBIDDEN [ALLOWED] [-test]: no package in the
# dependency graph of PATTERN may match the extended regex FORBIDDEN unless
# it matches ALLOWED. With -test, the packages' tests count too.
deps_rule() {
  local name=$1 pattern=$2 forbidden=$3 allowed=${4:-'^$'} test=${5:-}
  local dirs=${pattern%/...}
  [ -d "$dirs" ] || return 0
  allowed="$allowed|^$mod/$dirs(/|\$)" # a package may import itself and its children
  local graph
  graph=$(go list -e -deps $test -f '{{.ImportPath}}|{{join .Imports ","}}' "./$pattern" | strip_variants | sort -u)
  while IFS= read -r dep; do
    [ -n "$dep" ] || continue
    importers=$(awk -F'|' -v d="$dep" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == d) { print $1; break } }' <<<"$graph" | paste -sd, -)
    violation "$name must not depend on $dep (imported by $importers)"
  done < <(cut -d'|' -f1 <<<"$graph" | grep -E "$forbidden" | grep -vE "$allowed" || true)
}

cpuset='^k8s\.io/utils/cpuset$'
internal="^$mod/internal/"

# ---- leaf helpers
deps_rule internal "internal/..." "^k8s\.io/|^$mod/" "$cpuset|$internal"

# ---- libraries
libs=(topology cgroup recommend)
for lib in "${libs[@]}"; do
  forbidden="^k8s\.io/|^$mod/(agent|cmd|api|aggregator)(/|$)"
  for other in "${libs[@]}"; do
    [ "$other" = "$lib" ] || forbidden="$forbidden|^$mod/$other(/|$)"
  done
  deps_rule "$lib" "$lib/..." "$forbidden" "$cpuset" -test
done

# ---- the wire contracts
deps_rule api/local "api/local/..." "^k8s\.io/|^$mod/" "$cpuset|$internal"
deps_rule api/report "api/report/..." "^k8s\.io/|^$mod/" "$internal|^$mod/recommend$|\.test$" -test
deps_rule api/v1alpha1 "api/v1alpha1" "^k8s\.io/(client-go|api)(/|$)|^$mod/" "$internal"
deps_rule api/v1alpha1/policy "api/v1alpha1/policy" "^k8s\.io/(client-go|api)(/|$)|^$mod/" "$internal|^$mod/recommend$|^$mod/api/v1alpha1$"

# ---- agent's rooms
deps_rule agent/pools "agent/pools" "^k8s\.io/|^$mod/(agent|cmd|aggregator|recommend)(/|$)" "$cpuset|^$mod/agent/pools$"
deps_rule agent/rightsize "agent/rightsize/..." "^k8s\.io/(client-go|api)(/|$)|^$mod/(agent|cmd|aggregator)$|^$mod/(cmd|aggregator)/|^$mod/agent/(pools)(/|$)" "^$mod/agent/rightsize(/|$)|^$mod/agent/oomwatch$"
for room in collector history; do
  deps_rule "agent/$room" "agent/$room/..." "^k8s\.io/|^$mod/(agent|cmd|aggregator)$|^$mod/(cmd|aggregator)/|^$mod/agent/(pools)(/|$)" "$cpuset|^$mod/agent/$room(/|$)|^$mod/agent/oomwatch$"
done
deps_rule agent/oomwatch "agent/oomwatch/..." "^k8s\.io/|^$mod/(agent|cmd|api|aggregator|topology|recommend)(/|$)" "$cpuset"
deps_rule aggregator "aggregator/..." "^$mod/agent(/|$)"
aggr="^$mod/aggregator/"
report="^$mod/api/report$|^$mod/recommend$|$internal"
deps_rule aggregator/auth "aggregator/auth" "^k8s\.io/|^$mod/"
deps_rule aggregator/profile "aggregator/profile" "^k8s\.io/|^$mod/" "$report"
deps_rule aggregator/analysis "aggregator/analysis" "^k8s\.io/|^$mod/" "$report"
deps_rule aggregator/state "aggregator/state" "^k8s\.io/|^$mod/" "$report"
deps_rule aggregator/web "aggregator/web" "^k8s\.io/|^$mod/" "$report|$aggr(state|analysis|profile)$"
deps_rule aggregator/ingest "aggregator/ingest" "^k8s\.io/|^$mod/" "$report|$aggr(state|auth)$"
for room in extender webhook; do
  deps_rule "aggregator/$room" "aggregator/$room" "^k8s\.io/client-go(/|$)|^$mod/" "$report|^$mod/api/v1alpha1$|$aggr(profile)$"
done
deps_rule aggregator/kube "aggregator/kube" "$aggr(ingest|web|webhook|extender)$"
deps_rule cmd/cgpilotctl "cmd/cgpilotctl" "^k8s\.io/client-go(/|$)"
deps_rule cmd/cgpilot-agent "cmd/cgpilot-agent" "^k8s\.io/client-go/(kubernetes|discovery|informers|dynamic/dynamicinformer|metadata/metadatainformer)(/|$)|^$mod/agent/kube/kubetest$"

# ---- only cmd/* and test/* import agent; agent's sub-packages never do
while IFS='|' read -r pkg imports; do
  case $pkg in "$mod"/cmd/* | "$mod"/test/* | "$mod"/agent) continue ;; esac
  tr ',' '\n' <<<"$imports" | grep -qE "^$mod/agent$" &&
    violation "$pkg imports agent: only cmd/* and test/* may (move the shared part out of agent)"
done < <(go list -e -f '{{.ImportPath}}|{{join .Imports ","}},{{join .TestImports ","}},{{join .XTestImports ","}}' ./...)

# ---- package docs
while IFS= read -r pkg; do
  [ -z "$pkg" ] || violation "$pkg has no package doc comment (add a doc.go saying what it is for)"
done < <(go list -e -f '{{if not .Doc}}{{.ImportPath}}{{end}}' ./...)

# ---- linux build constraint on files that touch /sys, /proc or cgroupfs
touches='"/(sys|proc)(/|")|`/(sys|proc)(/|`)|"github\.com/(opencontainers/cgroups|containerd/cgroups|prometheus/procfs)'
while IFS= read -r f; do
  case $f in *_linux.go | *_linux_test.go) continue ;; esac
  grep -v '^[[:space:]]*//' "$f" | grep -qE "$touches" || continue
  # The constraint must require linux: "linux" alone or and-ed, never or-ed or negated.
  c=$(grep -m1 '^//go:build ' "$f" || true)
  if ! grep -qE '(^//go:build |&& *)linux( *&&|$)' <<<"$c" || grep -qE '\|\||!linux' <<<"$c"; then
    violation "$f touches /sys, /proc or cgroupfs but lacks //go:build linux"
  fi
done < <(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -not -path './bin/*' -not -path './_output/*' | sed 's:^\./::' | sort)

[ "$fail" = 0 ] && echo "check-imports: ok"
exit "$fail"
