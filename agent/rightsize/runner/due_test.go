package runner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDueQueueMatchesAWalk drives the queue with random schedules, forgets
// and rounds, and requires each round to return exactly the pods a walk of
// every tracked pod would find due (next not after now), with each popped
// pod queued again at the retry time.
func TestDueQueueMatchesAWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Unix(1_700_000_000, 0)
	for run := range 200 {
		r := &Runner{pods: map[string]*rsPod{}}
		now := base
		for op := range 300 {
			switch k := rng.IntN(10); {
			case k < 4: // a pod tracked or (re)scheduled
				uid := fmt.Sprintf("u%02d", rng.IntN(40))
				rp := r.pods[uid]
				if rp == nil {
					rp = &rsPod{ref: PodRef{UID: uid}, due: -1}
					r.pods[uid] = rp
				}
				at := time.Time{}
				if rng.IntN(3) > 0 {
					at = now.Add(time.Duration(rng.IntN(120)-20) * time.Second)
				}
				r.scheduleLocked(rp, at)
			case k < 6: // a pod forgotten
				uid := fmt.Sprintf("u%02d", rng.IntN(40))
				if rp := r.pods[uid]; rp != nil {
					r.unscheduleLocked(rp)
					delete(r.pods, uid)
				}
			default: // a round
				now = now.Add(time.Duration(rng.IntN(15)) * time.Second)
				var want []string
				for uid, rp := range r.pods {
					if !now.Before(rp.next) {
						want = append(want, uid)
					}
				}
				retry := now.Add(10 * time.Second)
				got := r.dueLocked(now, retry)
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("run %d op %d: due %v, a walk finds %v", run, op, got, want)
				}
				for _, uid := range got {
					if !r.pods[uid].next.Equal(retry) {
						t.Fatalf("run %d op %d: %s popped but not queued again at the retry", run, op, uid)
					}
				}
			}
			if len(r.queue) != len(r.pods) {
				t.Fatalf("run %d op %d: %d queued for %d tracked pods", run, op, len(r.queue), len(r.pods))
			}
			for i, rp := range r.queue {
				if rp.due != i {
					t.Fatalf("run %d op %d: queue[%d] says it is at %d", run, op, i, rp.due)
				}
			}
		}
	}
}

// BenchmarkDecideRoundNothingDue is a decision round at a sampling tick
// when none of 1,000 tracked pods is due (the common case: steps are
// minutes to hours, ticks 10 s): "queue" is the round now, "walk" the
// walk of every tracked pod it replaced, as a baseline in the same run.
func BenchmarkDecideRoundNothingDue(b *testing.B) {
	r := &Runner{pods: map[string]*rsPod{}}
	now := time.Now()
	for i := range 1000 {
		rp := &rsPod{ref: PodRef{UID: fmt.Sprint(i)}, due: -1}
		r.pods[rp.ref.UID] = rp
		r.scheduleLocked(rp, now.Add(time.Hour+time.Duration(i)*time.Second))
	}
	b.Run("queue", func(b *testing.B) {
		for range b.N {
			if len(r.dueLocked(now, now)) != 0 {
				b.Fatal("a pod was due")
			}
		}
	})
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			var uids []string
			for uid, rp := range r.pods {
				if !now.Before(rp.next) {
					uids = append(uids, uid)
				}
			}
			if len(uids) != 0 {
				b.Fatal("a pod was due")
			}
		}
	})
}
