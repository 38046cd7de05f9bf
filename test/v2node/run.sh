#!/usr/bin/env bash
# run.sh - run the node tier (a real kubelet + containerd 2 + runc, the
# pinned builds) inside the cgroup v2 qemu VM of test/v2vm, and exit with the
# tests' status.
#
#   test/v2node/run.sh [test flags...]
#   test/v2node/run.sh -run 'TestNodeExclusivePool' -v
#
# The whole test bed runs in the guest, on its loopback: the e2e test binary
# starts etcd, kube-apiserver, containerd and the kubelet
# through test/harness exactly as on the host, so the guest needs no network
# device. The VM's init loads overlay and veth (modules of the VM's Debian
# kernel, kept by test/v2vm/kernel.sh; V2VM_MODULES=1), so containerd uses
# the overlayfs snapshotter and pods get their own network namespace through
# the harness's ptp CNI config, as on the host. One thing differs from the
# host's node: runc runs with NoPivotRoot (MS_MOVE + chroot), because
# pivot_root fails when the host's root is the initramfs.
# The guest gets the binaries, their shared libraries (`ldd`), busybox (for
# the kubelet's `mount` and the harness's `ip`), the CNI plugins, a pause
# image archive built here, a few /etc files, and go.mod and deploy/crds
# (the tests read the RightsizePolicy CRD from the repository).
#
# Default test flags: -run '^(TestNodeOnCgroupV2)$' -v (see V2NODE_RUN).
# Environment: V2NODE_MEM (4G), V2NODE_TIMEOUT (900 s), V2NODE_KEEP=1 keeps
# the staging dir, V2NODE_CONTROLLERS=1 also packs kube-controller-manager
# and kube-scheduler (for tests that start them); the V2VM_* variables of
# test/v2vm/run.sh apply too.
#
# V2NODE_DEMO=1 is `make demo-v2`: the demo (TestDemoUpAndDown: make demo's
# steps, then make demo-down and its leak check) on the v2 node. It also
# packs the controllers, kubectl, deploy/kustomize (the demo applies it
# with the cgroup-v2 component) and the agent and aggregator images and
# cgpilotctl, built here (`go run ./test/cmd/demo images`: the VM has no Go
# toolchain); the demo's steps print as they run. Defaults then: 5G,
# 2400 s, no second boot after a timeout (V2VM_TIMEOUT_RETRIES=0).
#
# Exit status: test/v2vm/run.sh's (0 pass, 1 fail, 124 timeout, 125 the guest
# died, 2 setup error).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "v2node: $*" >&2; exit 2; }
note() { echo "v2node: $*" >&2; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0=$(now)
cd "$repo"
k8s=$(test/k8sbins/build.sh) || die "Kubernetes binaries: test/k8sbins/build.sh failed (make deps)"
rt=$(test/runtimebins/build.sh) || die "container runtime: test/runtimebins/build.sh failed (make deps)"
busybox=${V2NODE_BUSYBOX:-/bin/busybox}
[ -x "$busybox" ] || die "$busybox missing: apt-get install busybox-static (make deps)"
cni=
for d in /usr/lib/cni /opt/cni/bin; do
  if [ -x "$d/ptp" ] && [ -x "$d/host-local" ] && [ -x "$d/loopback" ]; then cni=$d; break; fi
done
[ -n "$cni" ] || die "CNI plugins ptp, host-local, loopback not found: apt-get install containernetworking-plugins (make deps)"

stage=$(mktemp -d -t cgpilot-v2node.XXXXXX)
cleanup() {
  if [ "${V2NODE_KEEP:-0}" = 1 ]; then note "staging dir kept: $stage"; else rm -rf "$stage"; fi
}
trap cleanup EXIT
mkdir -p "$stage"/{opt/k8s,opt/runtime,usr/lib/cni,bin,sbin,usr/bin,usr/sbin,etc,var/lib,var/log,v2node}

# Hard links where the cache and the staging dir share a filesystem.
put() { ln -f "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
demo=${V2NODE_DEMO:-0}
k8s_bins=(etcd kube-apiserver kubelet)
# TestNodeOnCgroupV2 runs no controller-manager or scheduler: 170 MB less to
# unpack. Tests that start them (harness.Options.Controllers) need this.
[ "${V2NODE_CONTROLLERS:-0}" = 1 ] || [ "$demo" = 1 ] && k8s_bins+=(kube-controller-manager kube-scheduler)
# The demo applies deploy/kustomize and runs its commands with kubectl.
[ "$demo" = 1 ] && k8s_bins+=(kubectl)
for b in "${k8s_bins[@]}"; do put "$k8s/$b" "$stage/opt/k8s/$b"; done
for b in containerd containerd-shim-runc-v2 ctr runc; do put "$rt/$b" "$stage/opt/runtime/$b"; done
for b in ptp host-local loopback; do put "$cni/$b" "$stage/usr/lib/cni/$b"; done
put "$busybox" "$stage/bin/busybox"
for a in $("$busybox" --list); do
  [ "$a" = busybox ] || [ -e "$stage/bin/$a" ] || ln -s busybox "$stage/bin/$a"
done

# Shared libraries of the dynamically linked binaries (the Kubernetes ones
# use cgo's resolver, runc libseccomp), at the paths ldd names.
for f in "$stage"/opt/k8s/* "$stage"/opt/runtime/* "$stage"/usr/lib/cni/*; do
  # ldd fails on a static binary: that one needs nothing.
  { ldd "$f" 2>/dev/null || true; } | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }'
done | sort -u | while read -r lib; do
  mkdir -p "$stage$(dirname "$lib")"
  cp -L "$lib" "$stage$lib"
done

printf 'root:x:0:0:root:/root:/bin/sh\n' >"$stage/etc/passwd"
printf 'root:x:0:\n' >"$stage/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$stage/etc/hosts"
# The kubelet builds pods' resolv.conf from it; nothing resolves in the VM.
printf 'nameserver 127.0.0.1\n' >"$stage/etc/resolv.conf"
printf 'hosts: files dns\n' >"$stage/etc/nsswitch.conf"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$stage/etc/machine-id"

# The tests find "the repository" (tier.RepoRoot: the main module's go.mod
# above their directory, /v2vm/pN) for the RightsizePolicy CRD.
mkdir -p "$stage/v2vm/deploy"
cp go.mod "$stage/v2vm/go.mod"
cp -r deploy/crds "$stage/v2vm/deploy/crds"

go run ./test/v2node/pausetar "$stage/v2node/pause.tar" || die "building the pause image failed"
if [ "$demo" = 1 ]; then
  cp -r deploy/kustomize "$stage/v2vm/deploy/kustomize"
  go run ./test/cmd/demo images --dir "$stage/v2node/demo" >&2 || die "building the demo's images failed"
fi
t_staged=$(now)
note "staged $(du -sh --apparent-size "$stage" | cut -f1) in $(dt "$t0" "$t_staged") s (k8s $k8s, runtime $rt)"

args=("$@")
mem=${V2NODE_MEM:-4G} timeout=${V2NODE_TIMEOUT:-900}
extra=()
if [ "$demo" = 1 ]; then
  [ ${#args[@]} -gt 0 ] || args=(-run '^TestDemoUpAndDown$' -v)
  mem=${V2NODE_MEM:-5G} timeout=${V2NODE_TIMEOUT:-2400}
  # A demo that ran out of time is not booted again for as long.
  export V2VM_TIMEOUT_RETRIES=${V2VM_TIMEOUT_RETRIES:-0}
  extra=(-e CGPILOT_DEMO_PREBUILT=/v2node/demo -e CGPILOT_DEMO_STREAM=1)
fi
[ ${#args[@]} -gt 0 ] || args=(-run "${V2NODE_RUN:-^(TestNodeOnCgroupV2)\$}" -v)
set +e
V2VM_MODULES=1 V2VM_EXTRA_ROOT=$stage test/v2vm/run.sh -m "$mem" -t "$timeout" \
  -e CGPILOT_TEST_E2E=1 -e CGPILOT_TEST_NODE=1 "${extra[@]+"${extra[@]}"}" \
  -e CGPILOT_K8S_BINS=/opt/k8s -e CGPILOT_RUNTIME_BINS=/opt/runtime \
  -e CGPILOT_NODE_NO_PIVOT=1 -e CGPILOT_PAUSE_ARCHIVE=/v2node/pause.tar \
  -e PATH=/bin:/sbin:/usr/bin:/usr/sbin \
  ./test/e2e "${args[@]}"
rc=$?
set -e
note "$(printf 'total %s s, exit status %s' "$(dt "$t0" "$(now)")" "$rc")"
exit "$rc"
