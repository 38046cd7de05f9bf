// Package images builds the test bed's container images locally, with no
// registry: a pause image from the static Go program in ./pause, a busybox
// image from the host's busybox-static, and any statically built Go command
// (the cgpilot agent image). Each is written as a docker-archive tar
// (manifest.json, config.json, one layer.tar) that `ctr images import`
// accepts; pods use them with imagePullPolicy: Never.
//
// CachedBinary and CachedGoImage keep built binaries and images in
// ~/.cache/cgpilot/images under the hash of their inputs (InputHash: Go
// version, build flags, go.mod, go.sum, the main module's source files the
// package imports), so a warm `make demo` builds nothing. The Dockerfile at
// the repository root builds the agent with the same flags for users.
//
// Error contract: every function returns an error wrapping ErrImage that
// names the file or command that failed; a partly written archive is
// removed.
//
// It imports only the standard library.
package images
