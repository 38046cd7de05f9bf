// Command pause is the test bed's sandbox ("pause") container: it holds
// the pod's namespaces, reaps orphans, and exits on SIGINT or SIGTERM. It
// is built statically and packed into docker.io/local/pause:1 by package
// images, so the test bed needs no registry.
//
// It imports only the standard library. main.go is all of it: it waits
// for signals, reaping every exited child on SIGCHLD.
package main
