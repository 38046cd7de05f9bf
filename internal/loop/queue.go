package loop

// Queue is what Work needs of a rate-limiting work queue: client-go's
// workqueue.TypedRateLimitingInterface has it (this package imports no
// client-go).
type Queue[K comparable] interface {
	Get() (key K, shutdown bool)
	Done(key K)
	Forget(key K)
	AddRateLimited(key K)
}

// Work is the one worker loop over a work queue: it takes keys from q
// until q is shut down and drained, and runs handle on each. A key handled
// without error has its backoff forgotten; one that failed is given to
// failed (to log it) and requeued with the queue's backoff. handle runs
// its own Guard iteration (a panic is its error), so that the caller
// decides what a panic costs beyond the retry.
func Work[K comparable](q Queue[K], handle func(K) error, failed func(K, error)) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := handle(key); err != nil {
			failed(key, err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}
