// Package loop keeps the long-lived goroutines of a cgpilot process
// alive: a panic in one iteration of a loop (a decision round, a
// workqueue key, an informer event, an OOM event, an HTTP request) is
// recovered, reported once through the Guard's OnPanic (the agent counts
// it in cgpilot_recovered_panics_total{loop} and logs it with its stack),
// and costs that iteration only; the loop goes on, after a backoff when
// iterations keep panicking. No goroutine of a long-running process may
// die on a nil or a race.
//
// It is the one place of that rule. It lives in internal/, not in package
// agent, because the agent's rooms (agent/collector, agent/oomwatch,
// agent/rightsize...) run loops of their own and may not import agent
// (hack/check-imports.sh); like every internal/ package it imports the
// standard library only, so the caller's OnPanic does the counting and
// the logging.
//
// Every (every.go) is the one ticker loop of periodic passes (the
// aggregator's folds, checkpoints, sweeps, Events and rescheduling): f
// every interval until the context ends, never overlapping itself.
// Guard.Every (loop.go, beside Run) is the same loop with each pass an
// iteration of a guarded loop (the agent's sweep, sampling rounds,
// reports and histogram checkpoints). Work is the one worker loop over a
// work queue (the agent's reconcile and status workers, the resize
// applier): a key that failed is requeued with the queue's backoff, one
// that did not has its backoff forgotten. Sleep is the one wait that ends
// with its context (Run's backoff, the report client's, the aggregator's
// retries).
//
// A recovered panic leaves the iteration half done: code that runs under
// a Guard must release its locks with defer (a lock held at the panic
// would turn a crash into a deadlock) and must not leave shared state
// half written.
package loop
