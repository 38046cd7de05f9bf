// Package vpacompat proves that recommend's "vpa" engine equals upstream VPA
// 1.8.1 (k8s.io/autoscaler/vertical-pod-autoscaler, model + logic packages)
// on the same samples: histograms bit for bit, and every hourly target,
// lower and upper bound on synthetic series and on the Bitbrains traces of
// ../shared/data (skipped with a message when absent).
//
// It is a separate Go module (replace → ../..) so that the main module never
// carries VPA and its Kubernetes dependencies; it has tests only and its
// errors are test failures. It must not be imported.
package vpacompat
