#!/usr/bin/env bash
# kernel.sh - fetch (or reuse) the Debian kernel the cgroup v2 VM boots, and
# print the path of its vmlinuz.
#
#   kernel.sh [-s SUITE] [-f FLAVOR]
#
#   -s SUITE   V2VM_SUITE   Debian suite: bookworm (default), bookworm-backports, trixie, sid
#   -f FLAVOR  V2VM_FLAVOR  cloud-amd64 (default) or amd64
#   V2VM_CACHE              cache dir, default ${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/v2vm
#   V2VM_REFRESH_DAYS       re-fetch a cached kernel older than this (default 7); when the
#                           refresh fails the cached kernel is used
#
# The package is downloaded with a private apt configuration (own sources.list,
# lists and archive dirs under the cache), unpacked with dpkg-deb and never
# installed: the host's apt state and /boot are untouched. Only vmlinuz,
# config and a few modules are kept (8-14 MB). The kernel needs no modules
# for the v2 tier: the serial console, cgroups, PSI, BPF and BTF are built
# in, and the VM uses no virtio devices. The node tier in the VM
# (test/v2node) loads overlay and veth (=m in Debian's config), which are
# kept with what they depend on in modules/, and modules/order lists them in
# load order (run.sh V2VM_MODULES packs them, the VM's init loads them).
#   V2VM_KEEP_MODULES       the modules kept (default "overlay veth")
set -euo pipefail

SUITE=${V2VM_SUITE:-bookworm}
FLAVOR=${V2VM_FLAVOR:-cloud-amd64}
CACHE=${V2VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot/v2vm}
REFRESH_DAYS=${V2VM_REFRESH_DAYS:-7}
KEEP_MODULES=${V2VM_KEEP_MODULES:-overlay veth}

die() { echo "v2vm kernel: $*" >&2; exit 2; }
note() { echo "v2vm kernel: $*" >&2; }

while getopts "s:f:h" o; do
  case $o in
    s) SUITE=$OPTARG ;;
    f) FLAVOR=$OPTARG ;;
    h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done

dir=$CACHE/kernels/$SUITE-$FLAVOR
# A kernel cached before modules were kept is fetched again (once).
has_modules() {
  local m
  for m in $KEEP_MODULES; do grep -q "/$m\.ko\(\.[a-z]*\)\?\$" "$dir/modules/order" 2>/dev/null || return 1; done
}
fresh() { [ -s "$dir/vmlinuz" ] && has_modules && [ -z "$(find "$dir/vmlinuz" -mtime +"$REFRESH_DAYS" 2>/dev/null)" ]; }
if fresh; then echo "$dir/vmlinuz"; exit 0; fi

for tool in apt-get apt-cache dpkg-deb flock; do
  command -v "$tool" >/dev/null || die "$tool not found: the kernel is fetched with Debian's apt (run on Debian, or pass a vmlinuz with run.sh -k)"
done

mkdir -p "$CACHE"
exec 9>"$CACHE/.kernel.lock"
flock 9 # two runs must not download into the same place
if fresh; then echo "$dir/vmlinuz"; exit 0; fi

# fetch runs in a subshell so that any failure falls back to a cached kernel.
fetch() (
  set -euo pipefail
  apt=$CACHE/apt/$SUITE
  rm -rf "$apt"
  mkdir -p "$apt/lists/partial" "$apt/archives/partial"
  # Use the mirrors this machine's apt already uses (one-line and deb822 formats).
  uris=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+' | sed 's:/*$::' || true)
  main=$(grep -E '/debian$' <<<"$uris" | head -n1 || true)
  sec=$(grep -E '/debian-security$' <<<"$uris" | head -n1 || true)
  main=${main:-http://deb.debian.org/debian}
  opt=
  [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] && opt='[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] '
  {
    echo "deb ${opt}$main $SUITE main"
    case $SUITE in
      *-backports | sid | unstable | experimental) ;;
      *)
        echo "deb ${opt}$main $SUITE-updates main"
        [ -z "$sec" ] || echo "deb ${opt}$sec $SUITE-security main"
        ;;
    esac
  } >"$apt/sources.list"
  o=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::archives=$apt/archives"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
    -o "APT::Sandbox::User=$(id -un)")
  note "fetching linux-image-$FLAVOR from $SUITE ($main)"
  apt-get "${o[@]}" -qq update >&2 || { echo "apt-get update for $SUITE failed" >&2; exit 1; }
  pkg=$(apt-cache "${o[@]}" depends "linux-image-$FLAVOR" | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$pkg" ] || { echo "no linux-image-$FLAVOR in $SUITE" >&2; exit 1; }
  # From 2026 sid splits a kernel: linux-image-X is empty, vmlinuz is in
  # linux-binary-X and config in linux-base-X (under /usr/lib/modules/X/).
  extra=$(apt-cache "${o[@]}" depends "$pkg" | awk '/Depends: linux-(binary|base)-/{print $2}' | sort -u)
  tmp=$apt/unpack
  mkdir -p "$tmp"
  # shellcheck disable=SC2086
  (cd "$tmp" && apt-get "${o[@]}" -qq download "$pkg" $extra >&2) || { echo "download of $pkg failed" >&2; exit 1; }
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
  vmlinuz=$(ls "$tmp"/x/boot/vmlinuz-* "$tmp"/x/usr/lib/modules/*/vmlinuz 2>/dev/null | head -n1 || true)
  config=$(ls "$tmp"/x/boot/config-* "$tmp"/x/usr/lib/modules/*/config 2>/dev/null | head -n1 || true)
  [ -n "$vmlinuz" ] || { echo "no vmlinuz in $pkg $extra" >&2; exit 1; }
  mkdir -p "$dir.new"
  cp "$vmlinuz" "$dir.new/vmlinuz"
  [ -z "$config" ] || cp "$config" "$dir.new/config"
  # The modules and their dependencies, dependencies first. The package has
  # no modules.dep (depmod writes it at install): a module's own .modinfo
  # names them ("depends=a,b" among its NUL-separated strings).
  moddir=$(ls -d "$tmp"/x/lib/modules/*/ "$tmp"/x/usr/lib/modules/*/ 2>/dev/null | head -n1 || true)
  if [ -n "$moddir" ]; then
    mkdir -p "$dir.new/modules"
    : >"$dir.new/modules/order"
    add() { # add NAME: its dependencies first, then itself
      local f rel dep
      f=$(find "$moddir" -name "$1.ko" -o -name "$1.ko.*" | head -n1)
      [ -n "$f" ] || f=$(find "$moddir" -name "${1//_/-}.ko" -o -name "${1//_/-}.ko.*" | head -n1)
      [ -n "$f" ] || { echo "module $1 not in $pkg" >&2; return 1; }
      rel=${f#"$moddir"}
      grep -qxF "$rel" "$dir.new/modules/order" && return 0
      for dep in $(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '); do add "$dep" || return 1; done
      mkdir -p "$dir.new/modules/$(dirname "$rel")"
      cp "$f" "$dir.new/modules/$rel"
      echo "$rel" >>"$dir.new/modules/order"
    }
    for m in $KEEP_MODULES; do add "$m" || exit 1; done
  fi
  (cd "$tmp" && ls ./*.deb | sed 's:^\./::') >"$dir.new/package"
  rm -rf "$dir" && mv "$dir.new" "$dir"
)

start=$(date +%s)
if fetch; then
  rm -rf "$CACHE/apt/$SUITE" # 20-50 MB of lists, useless until the next refresh
  rmdir "$CACHE/apt" 2>/dev/null || true
  note "cached $(tr '\n' ' ' <"$dir/package")in $dir ($(($(date +%s) - start))s)"
  echo "$dir/vmlinuz"
  exit 0
fi
rm -rf "$CACHE/apt/$SUITE" "$dir.new"
if [ -s "$dir/vmlinuz" ]; then
  note "refresh failed; using the cached kernel in $dir"
  echo "$dir/vmlinuz"
  exit 0
fi
die "could not fetch a $SUITE $FLAVOR kernel (needs Debian apt access; run make deps, or pass a vmlinuz with run.sh -k)"
