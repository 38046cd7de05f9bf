// Package images builds the test bed's container images locally, with no
// registry: a pause image from the static Go program in ./pause, a busybox
// image from the host's busybox-static, and any statically built Go command
// (the cgpilot agent image). Each is written as a docker-archive tar
// (manifest.json, config.json, one layer.tar) that `ctr images import`
// accepts; pods use them with imagePullPolicy: Never.
//
// CachedBinary, CachedGoImage and CachedRaceImage keep built binaries and
// images in a cache directory (DefaultCacheDir:
// ${XDG_CACHE_HOME:-~/.cache}/cgpilot/images) under the hash of their
// inputs (InputHash: Go version, build flags, go.mod, go.sum, the main
// module's source files the package imports), so a warm `make demo` builds
// nothing. The Dockerfile at the repository root builds the agent with the
// same flags for users.
//
// Error contract: every function returns an error wrapping ErrImage that
// names the file or command that failed; a partly written archive is
// removed.
//
// It imports only the standard library.
//
// # Files
//
// archive.go writes a deterministic docker-archive of one layer from a
// list of files and an image config, and names the pause and busybox
// references. build.go builds a Go command as a static binary and makes
// the Go, pause and busybox images. cache.go is the cache: its directory,
// InputHash, the cached binaries and Go images, and the pruning of
// entries a checkout no longer needs. race.go is the cached image of a
// static build with the race detector (the churn soak's agent).
package images
