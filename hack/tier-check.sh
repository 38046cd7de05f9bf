#!/usr/bin/env bash
# tier-check.sh TIER - can this machine run a test tier? Exit 0 if yes;
# otherwise print why not (one line, naming the fix) and exit 1.
# Used by `make test` to skip tiers with a reason, and by `make test-e2e` to
# decide whether the node tier (real kubelet + containerd) runs.
#
#   unit    Go (and cgo for the race detector unless RACE is empty)
#   kernel  Go, root (writes real cgroups on this host)
#   v2      Go, qemu-system-x86_64, cpio, and a cached kernel or Debian apt to fetch one
#   v2node  v2 + what the node in the VM needs: 5 GiB of free memory (a 4G
#           guest), busybox-static, the CNI plugins, and the container runtime
#           built or buildable (no root: the VM is TCG, the node runs inside)
#   v2demo  v2node with 6 GiB of free memory (the demo's 5 GiB guest:
#           make demo-v2, and the DaemonSet half of make test-v2node)
#   e2e     Go (the Kubernetes binaries are built from the Go module proxy)
#   node    e2e + root + CNI plugins, ip, iptables, and the node's container
#           runtime (containerd 2, runc: test/runtimebins/build.sh) built, or
#           what building it needs (cgo, pkg-config, libseccomp)
#
# V2_PRESENT / E2E_PRESENT (set by the Makefile): the test packages of the tier
# that exist on this branch; empty means there is nothing to run. RACE (set
# by the Makefile, -race by default): unit, kernel and e2e need cgo for it.
set -uo pipefail
tier=${1:?usage: tier-check.sh unit|kernel|v2|v2node|v2demo|e2e|node}
no() { echo "$*"; exit 1; }
root() { [ "$(id -u)" = 0 ] || no "$1"; }

command -v go >/dev/null || no "go not found: install Go 1.26 (see README)"
# race: the Makefile's RACE (-race by default) needs cgo, so a C compiler.
race() {
  [ -z "${RACE:-}" ] || [ "$(go env CGO_ENABLED)" = 1 ] ||
    no "the race detector needs cgo and no C compiler was found: run make deps (gcc), or RACE= to test without it"
}
case $tier in
  unit) race ;;
  kernel)
    race
    root "not root: the kernel tier writes real cgroups (run make test-kernel as root)"
    [ -r /proc/self/cgroup ] || no "/proc/self/cgroup unreadable: no cgroup support"
    ;;
  v2 | v2node | v2demo)
    [ -n "${V2_PRESENT-x}" ] || no "none of the v2 packages (V2_PKGS) exist on this branch"
    command -v qemu-system-x86_64 >/dev/null || no "qemu-system-x86_64 not found: run make deps"
    command -v cpio >/dev/null || no "cpio not found: run make deps"
    cache=${V2VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/v2vm}
    ls "$cache"/kernels/*/vmlinuz >/dev/null 2>&1 || command -v apt-get >/dev/null ||
      no "no cached v2 kernel and no apt-get to fetch one: run make deps on Debian"
    [ "$tier" = v2 ] && exit 0
    [ -n "${E2E_PRESENT-x}" ] || no "test/e2e does not exist on this branch"
    avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
    [ "${avail:-0}" -ge 5120 ] || no "only ${avail:-?} MiB of memory available: the v2 node's VM takes 4 GiB (V2NODE_MEM)"
    [ "$tier" = v2node ] || [ "${avail:-0}" -ge 6144 ] ||
      no "only ${avail:-?} MiB of memory available: the demo's VM on the v2 node takes 5 GiB (V2NODE_MEM)"
    [ -x /bin/busybox ] || no "/bin/busybox not found: run make deps (busybox-static)"
    for p in ptp loopback host-local; do
      [ -x /usr/lib/cni/$p ] || [ -x /opt/cni/bin/$p ] || no "CNI plugin $p not found: run make deps"
    done
    if ! "$(dirname "${BASH_SOURCE[0]}")/../test/runtimebins/build.sh" --check >/dev/null 2>&1; then
      [ "$(go env CGO_ENABLED)" = 1 ] || no "building runc (the node's runtime) needs cgo and no C compiler was found: run make deps (gcc)"
      pkg-config --exists libseccomp 2>/dev/null || no "building runc (the node's runtime) needs libseccomp: run make deps (pkg-config, libseccomp-dev)"
    fi
    ;;
  e2e)
    race
    [ -n "${E2E_PRESENT-x}" ] || no "none of the e2e packages (E2E_PKGS) exist on this branch"
    ;;
  node)
    root "not root: kubelet and containerd need root"
    for t in ip iptables; do
      command -v $t >/dev/null || no "$t not found: run make deps"
    done
    if ! "$(dirname "${BASH_SOURCE[0]}")/../test/runtimebins/build.sh" --check >/dev/null 2>&1; then
      [ "$(go env CGO_ENABLED)" = 1 ] || no "building runc (the node's runtime) needs cgo and no C compiler was found: run make deps (gcc)"
      pkg-config --exists libseccomp 2>/dev/null || no "building runc (the node's runtime) needs libseccomp: run make deps (pkg-config, libseccomp-dev)"
    fi
    for p in loopback host-local; do
      [ -x /usr/lib/cni/$p ] || [ -x /opt/cni/bin/$p ] || no "CNI plugin $p not found: run make deps"
    done
    ;;
  *) no "unknown tier $tier" ;;
esac
exit 0
