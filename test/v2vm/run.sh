#!/usr/bin/env bash
# run.sh - run Go packages' tests inside a throw-away qemu VM whose kernel has
# only cgroup v2 (cgroup_no_v1=all), and exit with the tests' status.
#
#   test/v2vm/run.sh [options] <packages...> [test flags...]
#   test/v2vm/run.sh ./test/v2 -run OOMKill -count 1
#   make test-v2 PKG=./cgroup/...
#
# Run it from inside the module, like `go test`. Packages are the arguments up
# to the first one that starts with "-" (or up to "--"); the rest are test
# flags: -v, -run X, -count N ... are rewritten to -test.v, -test.run X, ...
# Without test flags, -test.v is used; without -timeout, each binary gets the
# VM timeout minus 60 s, so a hung test dumps its goroutines. All packages
# share one VM boot and run one after another, each as root with
# CGPILOT_TEST_KERNEL=1, in a directory holding a copy of its testdata/.
#
# Options:
#   -k VMLINUZ  V2VM_KERNEL   kernel to boot (default: Debian's, see kernel.sh)
#   -s SUITE    V2VM_SUITE    Debian suite of the kernel (bookworm)
#   -f FLAVOR   V2VM_FLAVOR   cloud-amd64 | amd64 (cloud-amd64)
#   -m MEM      V2VM_MEM      guest RAM (1G)
#   -c N        V2VM_SMP      guest CPUs (2)
#   -t SECS     V2VM_TIMEOUT  timeout for one VM run (600): booted again once, then exit 124
#   -e K=V                    extra environment for the test binaries (repeatable)
#   -q                        do not echo the guest console; print the result lines
#                             (and the console tail when something failed)
#   V2VM_RETRIES  extra boots when the guest dies before reporting (2)
#   V2VM_TIMEOUT_RETRIES  extra boots after a timeout (1)
#   V2VM_KEEP=1   keep the work dir (initramfs, console.log)
#   V2VM_GOFLAGS  extra flags for `go test -c` (no -race: binaries are static, CGO is off)
#   V2VM_MODULES=1  pack the kernel modules kernel.sh keeps beside the kernel
#                 (modules/ and its order file: overlay, veth); the VM's init
#                 loads them before the tests
#   V2VM_EXTRA_ROOT  a directory whose tree is added to the guest's / (a second
#                 cpio archive appended to the initramfs; test/v2node packs a
#                 whole node in it)
#
# Exit status: the first failing test binary's status (0 when all pass);
# 124 timeout; 125 the guest never reported (kernel panic, init crash, after
# retries); 2 setup error (missing tool, build failure, kernel fetch).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KERNEL=${V2VM_KERNEL:-}
MEM=${V2VM_MEM:-1G}
SMP=${V2VM_SMP:-2}
TIMEOUT=${V2VM_TIMEOUT:-600}
RETRIES=${V2VM_RETRIES:-2}
QUIET=0
ENVS=(CGPILOT_TEST_KERNEL=1)
kernel_opts=()

die() { echo "v2vm: $*" >&2; exit 2; }
note() { echo "v2vm: $*" >&2; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

while getopts "k:s:f:m:c:t:e:qh" o; do
  case $o in
    k) KERNEL=$OPTARG ;;
    s) kernel_opts+=(-s "$OPTARG") ;;
    f) kernel_opts+=(-f "$OPTARG") ;;
    m) MEM=$OPTARG ;;
    c) SMP=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    e) [[ $OPTARG == *=* ]] || die "-e wants K=V, got $OPTARG"; ENVS+=("$OPTARG") ;;
    q) QUIET=1 ;;
    h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
pkgs=()
while [ $# -gt 0 ] && [[ $1 != -* ]]; do pkgs+=("$1"); shift; done
[ "${1:-}" != -- ] || shift
[ ${#pkgs[@]} -gt 0 ] || die "usage: $0 [options] <packages...> [test flags...] (see -h)"

command -v go >/dev/null || die "go not found: install Go 1.26 (see README)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run make deps (or apt-get install -y --no-install-recommends qemu-system-x86)"
command -v cpio >/dev/null || die "cpio not found: run make deps (or apt-get install -y cpio)"

t0=$(now)
if [ -z "$KERNEL" ]; then
  KERNEL=$("$here/kernel.sh" "${kernel_opts[@]+"${kernel_opts[@]}"}") || die "no kernel: see the message above, or run make deps"
fi
[ -r "$KERNEL" ] || die "kernel $KERNEL is not readable"
t_kernel=$(now)

work=$(mktemp -d -t cgpilot-v2vm.XXXXXX)
cleanup() {
  if [ "${V2VM_KEEP:-0}" = 1 ]; then note "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
root=$work/root
mkdir -p "$root"/{dev,proc,sys,tmp,run,root,v2vm}

# --------------------------------------------------------------- build ----
(cd "$here/vminit" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$root/init" .) ||
  die "building test/v2vm/vminit failed"

listing=$(go list -f '{{.ImportPath}}|{{.Dir}}|{{len .TestGoFiles}}|{{len .XTestGoFiles}}' "${pkgs[@]}") ||
  die "go list ${pkgs[*]} failed"
n=0
: >"$root/v2vm/manifest"
while IFS='|' read -r ip dir nt nx; do
  [ -n "$ip" ] || continue
  if [ "$nt" = 0 ] && [ "$nx" = 0 ]; then
    printf '?   \t%s\t[no test files]\n' "$ip"
    continue
  fi
  d=$root/v2vm/p$n
  mkdir -p "$d"
  # shellcheck disable=SC2086 # V2VM_GOFLAGS is a list of flags
  CGO_ENABLED=0 go test -c -trimpath ${V2VM_GOFLAGS:-} -o "$d/test.bin" "$ip" || die "go test -c $ip failed"
  [ ! -d "$dir/testdata" ] || cp -r "$dir/testdata" "$d/"
  printf '%s\t%s\n' "$ip" "/v2vm/p$n" >>"$root/v2vm/manifest"
  n=$((n + 1))
done <<<"$listing"
if [ "$n" = 0 ]; then
  note "no test files in ${pkgs[*]}: nothing to run"
  exit 0
fi

args=()
[ $# -gt 0 ] || args=(-test.v)
for a in "$@"; do
  if [[ $a =~ ^-(v|run|skip|count|timeout|short|failfast|bench|benchtime|benchmem|list|parallel|cpu|shuffle|json|fullpath)(=.*)?$ ]]; then
    a=-test.${a#-}
  fi
  args+=("$a")
done
# A raw test binary has no default timeout (go test adds one). Give each a
# deadline inside the VM's, so a hung test prints its goroutines instead of
# being cut off silently by the VM timeout.
if [[ " ${args[*]} " != *" -test.timeout"* ]]; then
  args+=("-test.timeout=$((TIMEOUT > 90 ? TIMEOUT - 60 : TIMEOUT * 2 / 3))s")
fi
printf '%s\n' "${args[@]}" >"$root/v2vm/args"
printf '%s\n' "${ENVS[@]}" >"$root/v2vm/env"
if [ "${V2VM_MODULES:-0}" = 1 ]; then
  mods=$(dirname "$KERNEL")/modules
  [ -s "$mods/order" ] || die "V2VM_MODULES=1 but $mods/order is missing: the cached kernel predates kept modules (run test/v2vm/kernel.sh with V2VM_REFRESH_DAYS=0), or -k names a kernel without them"
  cp -r "$mods" "$root/v2vm/modules"
fi

# Uncompressed newc: the kernel unpacks it directly, and compressing ~10-30 MB
# of Go binaries costs more time than it saves. -R 0:0 so no root is needed.
(cd "$root" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) >"$work/initrd.cpio"
# The kernel unpacks concatenated newc archives one after the other.
if [ -n "${V2VM_EXTRA_ROOT:-}" ]; then
  [ -d "$V2VM_EXTRA_ROOT" ] || die "V2VM_EXTRA_ROOT=$V2VM_EXTRA_ROOT is not a directory"
  (cd "$V2VM_EXTRA_ROOT" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) >>"$work/initrd.cpio"
fi
t_built=$(now)

# ---------------------------------------------------------------- boot ----
# TCG only: /dev/kvm on these machines is PVM (no vmx/svm) and cannot run a
# stock kernel, and hosted CI rarely offers nested virtualisation; a KVM path
# would be a second, untested configuration.
# tsc=reliable: otherwise TCG declares the TSC unstable and Go's time.Now
# becomes a trapping HPET read (boot ~5.7 s -> ~3 s). quiet: serial printing
# is slow. cgroup_no_v1=all leaves cgroup2 as the only hierarchy.
cmdline="console=ttyS0 rdinit=/init cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 panic=-1 oops=panic quiet loglevel=3 tsc=reliable no_timer_check cryptomgr.notests mitigations=off"
note "kernel=$KERNEL mem=$MEM smp=$SMP packages=$n initrd=$(du -h "$work/initrd.cpio" | cut -f1) timeout=${TIMEOUT}s"
log=$work/console.log

boot() {
  : >"$log"
  t_qemu=$(now)
  t_init='' t_end=''
  set +e
  timeout -k 5 "$TIMEOUT" qemu-system-x86_64 \
    -nodefaults -no-user-config -display none -no-reboot \
    -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP" \
    -serial stdio -kernel "$KERNEL" -initrd "$work/initrd.cpio" -append "$cmdline" \
    </dev/null 2>&1 | while IFS= read -r line; do
      line=${line%$'\r'}
      printf '%s\n' "$line" >>"$log"
      [ "$QUIET" = 1 ] || printf '%s\n' "$line"
      case $line in
        "V2VM: init started"*) echo "init $(now)" >>"$log.marks" ;;
        "V2VM: EXIT_CODE="*) echo "end $(now)" >>"$log.marks" ;;
      esac
    done
  qemu_rc=${PIPESTATUS[0]}
  set -e
  t_exit=$(now)
  if [ -f "$log.marks" ]; then
    t_init=$(awk '$1=="init"{print $2; exit}' "$log.marks")
    t_end=$(awk '$1=="end"{print $2; exit}' "$log.marks")
    rm -f "$log.marks"
  fi
  # Only a line that starts with the marker counts, so test output quoting it cannot.
  rc=$(sed -n 's/^V2VM: EXIT_CODE=\([0-9][0-9]*\)$/\1/p' "$log" | tail -n1)
  if [ -z "$rc" ]; then
    if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
      rc=124
      note "timeout: the VM did not finish within ${TIMEOUT}s (raise it with -t)"
    else
      rc=125
      note "the guest stopped without reporting an exit code (qemu status $qemu_rc)"
      grep -a -m3 -E 'Kernel panic|RIP:|general protection|V2VM: (mount|open|read|bad)' "$log" >&2 || true
    fi
  fi
}

# A guest that dies before reporting (seen with Debian's 6.12 kernel under
# qemu 7.2 TCG: a GPF during early text patching) is booted again. A timeout
# is booted again once: a guest frozen under TCG (seen once in 2026-11: no
# output, not even the tests' own goroutine dump, for 9 minutes after an
# OOM test started) passed at once on the next boot; a test that really
# hangs hangs again, and fails.
tries=0
timeouts=0
while :; do
  boot
  if [ "$rc" = 124 ] && [ "$timeouts" -lt "${V2VM_TIMEOUT_RETRIES:-1}" ]; then
    timeouts=$((timeouts + 1))
    tries=$((tries + 1))
    note "booting again after the timeout ($timeouts of ${V2VM_TIMEOUT_RETRIES:-1})"
    continue
  fi
  if [ "$rc" != 125 ] || [ "$tries" -ge "$RETRIES" ]; then break; fi
  tries=$((tries + 1))
  note "booting again (retry $tries of $RETRIES)"
done

if [ "$QUIET" = 1 ]; then
  # Quiet still shows what go test would: per-package results, and all of the
  # output when something failed.
  if [ "$rc" = 0 ]; then grep -aE '^(ok  |\?   |FAIL|--- FAIL)' "$log" || true; else tail -n 80 "$log"; fi
fi
note "$(printf 'times (s): kernel %s, build+pack %s, boot->init %s, tests %s, total %s; retries %s; exit status %s' \
  "$(dt "$t0" "$t_kernel")" "$(dt "$t_kernel" "$t_built")" \
  "$([ -n "$t_init" ] && dt "$t_qemu" "$t_init" || echo '?')" \
  "$([ -n "$t_init" ] && [ -n "$t_end" ] && dt "$t_init" "$t_end" || echo '?')" \
  "$(dt "$t0" "$t_exit")" "$tries" "$rc")"
exit "$rc"
