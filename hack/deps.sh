#!/usr/bin/env bash
# deps.sh [demo|demo-v2|test|all] - install what is missing for `make demo`,
# `make demo-v2`, `make test` or all (default), idempotently, saying what it
# does:
#
#   apt packages   (root, Debian) the node tier and the demo: busybox-static,
#                  CNI plugins, iproute2, iptables, and gcc, libc6-dev,
#                  pkg-config, libseccomp-dev (runc's build: cgo and
#                  seccomp); for test also qemu-system-x86 and cpio (the v2
#                  VM), clang-19, llvm-19, libbpf-dev (the eBPF objects'
#                  regeneration check) and chromium (the aggregator
#                  dashboard's browser test); gcc is also cgo for the race
#                  detector. No containerd or runc from apt: Debian's are
#                  1.6 and 1.1.
#   k8s binaries   test/k8sbins/build.sh: built once from the Go module proxy
#                  (10-20 min on 2 cores), cached by their pin
#   runtime        test/runtimebins/build.sh: the node's containerd 2 (with
#                  its runc shim and ctr) and runc, built once from the Go
#                  module proxy (about 4-5 min on 2 cores), cached by their pin
#   v2 VM kernel   test/v2vm/kernel.sh (test and demo-v2): a Debian kernel, cached
#   descheduler    test/deschedbin/build.sh (test only): the upstream
#                  descheduler the rescheduling tests run, built once from the
#                  Go module proxy (3-5 min on 2 cores), cached by its pin
#
# demo-v2 is the node's packages, qemu-system-x86 and cpio, the Kubernetes
# binaries, the runtime and the VM kernel; it needs no root when they are
# there (the node runs inside the TCG VM).
#
# `make demo`, `make demo-v2` and `make test` run it first; when everything
# is there it takes well under a second. For demo and demo-v2 a missing
# piece is an error. For test
# it is not: the tiers that need it are skipped by `make test`, which says
# why (hack/tier-check.sh), and the rest still runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-all}
case $what in demo | demo-v2 | test | all) ;; *) echo "usage: $0 [demo|demo-v2|test|all]" >&2; exit 2 ;; esac

NODE_PKGS="busybox-static containernetworking-plugins iproute2 iptables gcc libc6-dev pkg-config libseccomp-dev"
TEST_PKGS="qemu-system-x86 cpio clang-19 llvm-19 libbpf-dev chromium"
pkgs=$NODE_PKGS
steps=3
case $what in
  demo-v2) pkgs="$pkgs qemu-system-x86 cpio"; steps=4 ;;
  test | all) pkgs="$pkgs $TEST_PKGS"; steps=5 ;;
esac
# demo and demo-v2 stop at the first missing piece.
strict=0
[[ $what == demo* ]] && strict=1

# The demo runs a real kubelet and containerd: nothing to install for a
# user who cannot run it.
if [ "$what" = demo ] && [ "$(id -u)" != 0 ]; then
  echo "deps: make demo runs a real kubelet and containerd: run it as root (sudo make demo)" >&2
  exit 1
fi

start=$(date +%s%N)
ms() { echo "$(( ($(date +%s%N) - $1) / 1000000 ))ms"; }
rc=0
failed() { # what, why
  echo "deps: $1: $2" >&2
  if [ "$strict" = 1 ]; then exit 1; fi
  rc=1
}

t=$(date +%s%N)
if ! command -v dpkg-query >/dev/null; then
  failed "1/$steps apt packages" "not Debian (no dpkg-query): install $pkgs yourself"
else
  # One dpkg-query for all (a package it does not know is missing too).
  installed=" $(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null | awk '/ install ok installed$/ { printf "%s ", $1 }')"
  missing=$(for p in $pkgs; do [[ $installed == *" $p "* ]] || echo "$p"; done | xargs)
  if [ -z "$missing" ]; then
    echo "deps 1/$steps: apt packages present ($(ms "$t"))"
  elif [ "$(id -u)" != 0 ]; then
    failed "1/$steps apt packages" "missing $missing: run as root (sudo make deps)"
  else
    echo "deps 1/$steps: apt-get install $missing"
    if DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing </dev/null; then
      echo "deps 1/$steps: installed $missing ($(ms "$t"))"
    else
      failed "1/$steps apt packages" "apt-get install $missing failed (see above)"
    fi
  fi
fi

# pinned STEP SCRIPT DONE BUILDING NAME: SCRIPT --check prints where its
# build is cached; without one SCRIPT builds it (once: the build is cached
# by its pin) and prints the same. DONE comes before what SCRIPT printed,
# BUILDING says what is being built, NAME names the step when it fails.
pinned() {
  local t out
  t=$(date +%s%N)
  if out=$("$2" --check); then
    echo "deps $1/$steps: $3$out ($(ms "$t"))"
    return
  fi
  echo "deps $1/$steps: building $4"
  if out=$("$2"); then
    echo "deps $1/$steps: $3$out ($(ms "$t"))"
  else
    failed "$1/$steps $5" "$2 failed (see above)"
  fi
}

pinned 2 test/k8sbins/build.sh "Kubernetes binaries in " "the Kubernetes binaries (once; cached by their pin)" "Kubernetes binaries"

pinned 3 test/runtimebins/build.sh "containerd and runc in " "the node's containerd and runc (once; cached by their pin)" "containerd and runc"

if [ "$what" != demo ]; then
  t=$(date +%s%N)
  if k=$(test/v2vm/kernel.sh); then
    echo "deps 4/$steps: v2 VM kernel $k ($(ms "$t"))"
  else
    failed "4/$steps v2 VM kernel" "test/v2vm/kernel.sh failed (see above)"
  fi
fi
if [ "$what" = test ] || [ "$what" = all ]; then
  pinned 5 test/deschedbin/build.sh "descheduler " "the descheduler (once; cached by its pin)" descheduler
fi
echo "deps: done in $(ms "$start")"
exit $rc
