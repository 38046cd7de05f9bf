package runner

import (
	"container/heap"
	"time"
)

// dueQueue orders the tracked pods by their next decision (rsPod.next), so
// that a decision round looks only at the pods that are due instead of
// walking every tracked pod at every sampling tick. It is a min-heap of
// the pods themselves: each pod is in it once, at rsPod.due.
type dueQueue []*rsPod

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q dueQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].due, q[j].due = i, j
}
func (q *dueQueue) Push(x any) {
	rp := x.(*rsPod)
	rp.due = len(*q)
	*q = append(*q, rp)
}
func (q *dueQueue) Pop() any {
	old := *q
	rp := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	rp.due = -1
	return rp
}

// scheduleLocked sets when rp is next decided (the zero time: at the next
// round) and queues it there. r.mu is held.
func (r *Runner) scheduleLocked(rp *rsPod, at time.Time) {
	rp.next = at
	if r.queued(rp) {
		heap.Fix(&r.queue, rp.due)
		return
	}
	heap.Push(&r.queue, rp)
}

// queued says whether rp is in the queue at rp.due (a pod built outside
// Track, as tests do, has due 0 without being queued). r.mu is held.
func (r *Runner) queued(rp *rsPod) bool {
	return rp.due >= 0 && rp.due < len(r.queue) && r.queue[rp.due] == rp
}

// unscheduleLocked takes a forgotten pod out of the queue. r.mu is held.
func (r *Runner) unscheduleLocked(rp *rsPod) {
	if r.queued(rp) {
		heap.Remove(&r.queue, rp.due)
	}
	rp.due = -1
}

// dueLocked returns the UIDs of the pods due at now, in the order they
// fell due, and queues each again at retry: a pod that is decided is
// queued at its step by decide, and one that is not (its pod object is
// missing from the cache for a moment) is tried again then, as the walk
// this replaced retried it at the next tick. r.mu is held.
func (r *Runner) dueLocked(now, retry time.Time) []string {
	var uids []string
	var popped []*rsPod
	for len(r.queue) > 0 && !now.Before(r.queue[0].next) {
		rp := heap.Pop(&r.queue).(*rsPod)
		popped = append(popped, rp)
		uids = append(uids, rp.ref.UID)
	}
	for _, rp := range popped {
		r.scheduleLocked(rp, retry)
	}
	return uids
}
