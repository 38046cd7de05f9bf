# cache.sh - the one home of how cgpilot caches a binary built at a pin.
# Sourced (not run) by test/k8sbins/build.sh, test/runtimebins/build.sh,
# test/deschedbin/build.sh and hack/tool.sh, which keep only what to build;
# hack/buildcache/cache_test.go tests it.
#
# A cache is one directory per pin under $cache_root/<kind>/, and it is a
# hit only when every binary it must hold is executable. A build runs under
# a lock, into <dir>.tmp, which is renamed into place once complete: an
# interrupted build leaves only a .tmp, never a hit, and two builders never
# write the same directory. Nothing here changes what is built, which is
# why a build.sh's key hashes the build.sh (its go build lines) and not
# this file.
#
# The caller sets:
#   cache_who       the prefix of its messages (stderr)
#   cache_dir       this pin's directory: $cache_root/<kind>/<key>
#   cache_bins      the binaries (names in cache_dir) a hit must hold
#   cache_out       what it prints on stdout: cache_dir, or the binary in it
#   cache_lock      (optional) the lock file; default <kind>/.lock, one
#                   builder per kind
#   cache_siblings  (optional) the name prefix of this build's other pins in
#                   <kind>/, which a finished build deletes; default all
# and calls cache_reuse "$@", then cache_begin, its builds (cache_step for
# each binary, into $cache_tmp), then cache_commit.

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/cgpilot

# cache_need_go: every pinned build is a go build, and its key names the Go
# version.
cache_need_go() {
  command -v go >/dev/null || { echo "$cache_who: go not found: install Go 1.26 (see README)" >&2; exit 2; }
}

# cache_pin MODULE prints the version go.mod (of the current directory)
# requires of MODULE; exits 2 if it has none. Only "module vX" lines count,
# not replace lines ("module => ...").
cache_pin() {
  local v
  v=$(awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' go.mod)
  [ -n "$v" ] || { echo "$cache_who: no $1 pin in $PWD/go.mod" >&2; exit 2; }
  echo "$v"
}

# cache_key FILE... prints the key of a build: a hash of the files that fix
# what it builds (its go.mod, go.sum and build.sh) and the Go version.
cache_key() {
  echo "$(cat "$@" | sha256sum | cut -c1-16)-$(go env GOVERSION)"
}

cache_hit() {
  local b
  for b in $cache_bins; do [ -x "$cache_dir/$b" ] || return 1; done
}

# cache_reuse [--check]: on a hit, print cache_out and exit 0. Otherwise
# --check exits 1; without it, take the lock (waiting, and saying so, while
# another builder holds it) and look again, since that builder may have
# built this pin; return to build only on a miss.
cache_reuse() {
  : "${cache_who:?}" "${cache_dir:?}" "${cache_bins:?}" "${cache_out:?}"
  if cache_hit; then echo "$cache_out"; exit 0; fi
  if [ "${1:-}" = --check ]; then exit 1; fi
  local base=${cache_dir%/*}
  mkdir -p "$base"
  exec 9>"${cache_lock:-$base/.lock}"
  if ! flock -n 9; then
    echo "$cache_who: another build is running; waiting for it" >&2
    flock 9
  fi
  if cache_hit; then echo "$cache_out"; exit 0; fi
}

# cache_begin WHAT COLD: start building WHAT ("descheduler v0.36.0") into
# a fresh $cache_tmp; COLD says how long a cold build takes.
cache_begin() {
  cache_what=$1
  cache_tmp=$cache_dir.tmp
  rm -rf "$cache_tmp"
  mkdir -p "$cache_tmp"
  echo "$cache_who: building $1 into $cache_dir (cold: $2)" >&2
  cache_start=$(date +%s)
}

# cache_step BIN PKG COMMAND...: run COMMAND, which builds PKG into
# $cache_tmp/BIN, with its progress and size. A failing COMMAND ends the
# caller (set -e) with its exit code.
cache_step() {
  local bin=$1 pkg=$2 s
  shift 2
  s=$(date +%s)
  echo "$cache_who: [$bin] building $pkg ..." >&2
  "$@"
  echo "$cache_who: [$bin] done in $(($(date +%s) - s))s ($(du -h "$cache_tmp/$bin" | cut -f1))" >&2
}

# cache_commit: rename the finished build into place, delete this build's
# other pins (dead weight: ~400 MB each for Kubernetes), print cache_out.
cache_commit() {
  local old
  rm -rf "$cache_dir"
  mv "$cache_tmp" "$cache_dir"
  for old in "${cache_dir%/*}/${cache_siblings:-}"*; do
    [ "$old" = "$cache_dir" ] || [ ! -d "$old" ] || rm -rf "$old"
  done
  echo "$cache_who: $cache_what built in $(($(date +%s) - cache_start))s" >&2
  echo "$cache_out"
}
