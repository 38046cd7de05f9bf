#!/usr/bin/env bash
# check-imports.sh - enforce cgpilot's package rules (run by make lint).
#
#  1. topology, cgroup and recommend (with their tests, transitively, via
#     `go list -deps -test`) import no k8s.io/* package except
#     k8s.io/utils/cpuset, and none of each other or agent.
#  2. No package imports agent except cmd/* (and agent's own sub-packages).
#  3. Every package has a package doc comment.
#  4. Every .go file that touches /sys, /proc or cgroupfs carries a build
#     constraint that requires linux (//go:build linux, or a _linux.go name).
#     "Touches" is decided by a heuristic: a string literal starting with /sys
#     or /proc outside a // comment, or an import of a library that reads them
#     (opencontainers/cgroups, containerd/cgroups, prometheus/procfs).
#  5. api/... (the cluster-facing types) imports only the standard library,
#     k8s.io/apimachinery and api/... itself, and depends (transitively, tests
#     aside) on no k8s.io/client-go, no k8s.io/api and no other cgpilot
#     package, so that anything can import it cheaply.
#
# Prints every violation and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mod=$(go list -m)
fail=0
violation() { echo "check-imports: $*" >&2; fail=1; }

# go list -test names test variants "pkg [pkg.test]"; the rules are about pkg.
strip_variants() { sed -E 's/ \[[^]]*\]//g'; }

# ---- 1. library purity
libs=(topology cgroup recommend)
for lib in "${libs[@]}"; do
  [ -d "$lib" ] || continue
  # One line per dependency: "<path>|<its direct imports, comma-separated>".
  graph=$(go list -e -deps -test -f '{{.ImportPath}}|{{join .Imports ","}}' "./$lib/..." | strip_variants | sort -u)
  forbidden="^k8s\.io/|^$mod/(agent|cmd)(/|$)"
  for other in "${libs[@]}"; do
    [ "$other" = "$lib" ] || forbidden="$forbidden|^$mod/$other(/|$)"
  done
  while IFS= read -r dep; do
    [ -n "$dep" ] || continue
    importers=$(awk -F'|' -v d="$dep" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == d) { print $1; break } }' <<<"$graph" | paste -sd, -)
    violation "$lib must not depend on $dep (imported by $importers)"
  done < <(cut -d'|' -f1 <<<"$graph" | grep -E "$forbidden" | grep -vx 'k8s.io/utils/cpuset' || true)
done

# ---- 2. only cmd imports agent
while IFS='|' read -r pkg imports; do
  case $pkg in "$mod"/cmd/* | "$mod"/agent | "$mod"/agent/*) continue ;; esac
  tr ',' '\n' <<<"$imports" | grep -qE "^$mod/agent(/|$)" &&
    violation "$pkg imports agent: only cmd/* may (move the shared part out of agent)"
done < <(go list -e -f '{{.ImportPath}}|{{join .Imports ","}},{{join .TestImports ","}},{{join .XTestImports ","}}' ./...)

# ---- 3. package docs
while IFS= read -r pkg; do
  [ -z "$pkg" ] || violation "$pkg has no package doc comment (add a doc.go saying what it is for)"
done < <(go list -e -f '{{if not .Doc}}{{.ImportPath}}{{end}}' ./...)

# ---- 4. linux build constraint on files that touch /sys, /proc or cgroupfs
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

# ---- 5. the API package
if [ -d api ]; then
  while IFS='|' read -r pkg imports; do
    for imp in ${imports//,/ }; do
      case $imp in
        k8s.io/apimachinery/* | "$mod"/api/*) ;;
        *.*/*) violation "$pkg imports $imp: api/ may import only the standard library and k8s.io/apimachinery" ;;
      esac
    done
  done < <(go list -e -f '{{.ImportPath}}|{{join .Imports ","}}' ./api/...)
  while IFS= read -r dep; do
    [ -n "$dep" ] || continue
    violation "api/ must not depend on $dep (the API types must stay importable without client-go)"
  done < <(go list -e -deps ./api/... | grep -E "^k8s\.io/(client-go|api)(/|$)|^$mod/" | grep -vE "^$mod/api(/|$)" || true)
fi

[ "$fail" = 0 ] && echo "check-imports: ok"
exit "$fail"
