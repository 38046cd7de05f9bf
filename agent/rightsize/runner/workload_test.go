package runner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgpilot/cgpilot/agent/kube/kubetest"
	"github.com/cgpilot/cgpilot/api/report"
)

func controlledBy(kind, name string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &yes}}
}

func ownedPod(name string, owner []metav1.OwnerReference, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), OwnerReferences: owner, Labels: labels}}
}

// ownerBed is an owner cache on a fake API server, its workers running.
type ownerBed struct {
	o        *ownerCache
	mu       sync.Mutex
	requeued []string
	gets     atomic.Int32
}

func newOwnerBed(t *testing.T, react func() error, objs ...runtime.Object) *ownerBed {
	t.Helper()
	cs := fake.NewClientset(objs...)
	b := &ownerBed{}
	cs.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		b.gets.Add(1)
		if react != nil {
			if err := react(); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	b.o = newOwnerCache(kubetest.New(cs, nil), func(ns, name string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.requeued = append(b.requeued, ns+"/"+name)
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range ownerWorkers {
		wg.Go(func() { b.o.run(ctx, nil) })
	}
	t.Cleanup(func() { cancel(); b.o.stop(); wg.Wait() })
	return b
}

// settled waits until no owner is pending.
func (b *ownerBed) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.o.mu.Lock()
		n := len(b.o.pending)
		b.o.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d owners still pending", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *ownerBed) requeues() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requeued...)
}

// TestWorkloadOfAnswersAtOnceAndRequeuesWhenTheOwnerDiffers: a pod is
// named without waiting for the API server, and queued again only when
// the owner's answer names its workload otherwise.
func TestWorkloadOfAnswersAtOnceAndRequeuesWhenTheOwnerDiffers(t *testing.T) {
	rs := func(name, deploy string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, OwnerReferences: controlledBy("Deployment", deploy)}}
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-29000", OwnerReferences: controlledBy("CronJob", "nightly")}}
	rollout := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "canary-7d9f", OwnerReferences: controlledBy("Rollout", "canary")}}
	b := newOwnerBed(t, nil, rs("web-7d9f", "web"), rs("odd", "api"), job, rollout)

	cases := []struct {
		pod          *corev1.Pod
		first, final report.Workload
	}{
		{ownedPod("web-7d9f-x1", controlledBy("ReplicaSet", "web-7d9f"), map[string]string{"pod-template-hash": "7d9f"}),
			report.Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}, report.Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}},
		{ownedPod("odd-x1", controlledBy("ReplicaSet", "odd"), nil),
			report.Workload{Namespace: "shop", Kind: "ReplicaSet", Name: "odd"}, report.Workload{Namespace: "shop", Kind: "Deployment", Name: "api"}},
		{ownedPod("nightly-29000-x1", controlledBy("Job", "nightly-29000"), nil),
			report.Workload{Namespace: "shop", Kind: "Job", Name: "nightly-29000"}, report.Workload{Namespace: "shop", Kind: "CronJob", Name: "nightly"}},
		{ownedPod("canary-7d9f-x1", controlledBy("ReplicaSet", "canary-7d9f"), map[string]string{"pod-template-hash": "7d9f"}),
			report.Workload{Namespace: "shop", Kind: "Deployment", Name: "canary"}, report.Workload{Namespace: "shop", Kind: "Rollout", Name: "canary"}},
		{ownedPod("gone-x1", controlledBy("Job", "gone"), nil), // its Job deleted: named by it for good
			report.Workload{Namespace: "shop", Kind: "Job", Name: "gone"}, report.Workload{Namespace: "shop", Kind: "Job", Name: "gone"}},
		{ownedPod("db-0", controlledBy("StatefulSet", "db"), nil), // no lookup
			report.Workload{Namespace: "shop", Kind: "StatefulSet", Name: "db"}, report.Workload{Namespace: "shop", Kind: "StatefulSet", Name: "db"}},
	}
	for _, c := range cases {
		if got := b.o.workloadOf(c.pod); got != c.first {
			t.Errorf("%s first named %v, want %v", c.pod.Name, got, c.first)
		}
	}
	b.settled(t)
	want := map[string]bool{"shop/odd-x1": true, "shop/nightly-29000-x1": true, "shop/canary-7d9f-x1": true}
	got := b.requeues()
	if len(got) != len(want) {
		t.Errorf("requeued %v, want the pods whose workload the answer changed: %v", got, want)
	}
	for _, k := range got {
		if !want[k] {
			t.Errorf("requeued %s, whose workload did not change", k)
		}
	}
	for _, c := range cases {
		if got := b.o.workloadOf(c.pod); got != c.final {
			t.Errorf("%s then named %v, want %v", c.pod.Name, got, c.final)
		}
	}
	if n := b.gets.Load(); n != 5 {
		t.Errorf("%d GETs, want one per ReplicaSet or Job (5)", n)
	}
	b.settled(t)
	if n := b.gets.Load(); n != 5 {
		t.Errorf("%d GETs after the answers were cached, want 5", n)
	}
}

// TestWorkloadOfDoesNotWaitForTheAPIServer: an API server that does not
// answer does not hold the caller; pods of one owner share one GET.
func TestWorkloadOfDoesNotWaitForTheAPIServer(t *testing.T) {
	release := make(chan struct{})
	b := newOwnerBed(t, func() error { <-release; return nil },
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "odd", OwnerReferences: controlledBy("Deployment", "api")}})
	start := time.Now()
	for _, name := range []string{"odd-1", "odd-2", "odd-3"} {
		if got := b.o.workloadOf(ownedPod(name, controlledBy("ReplicaSet", "odd"), nil)); got.Kind != "ReplicaSet" {
			t.Errorf("%s named %v while the API server is silent, want its ReplicaSet", name, got)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("workloadOf waited %v for a silent API server", d)
	}
	close(release)
	b.settled(t)
	if n := b.gets.Load(); n != 1 {
		t.Errorf("%d GETs for three pods of one ReplicaSet, want 1", n)
	}
	if got := b.requeues(); len(got) != 3 {
		t.Errorf("requeued %v, want the three pods", got)
	}
}

// TestWorkloadOfGivesUpOnAFailingAPIServer: an API server that fails is
// asked ownerTries times, with backoff; the pod keeps its name, nothing
// is cached, and a later Track asks again.
func TestWorkloadOfGivesUpOnAFailingAPIServer(t *testing.T) {
	defer func(lo, hi time.Duration) { ownerRetryMin, ownerRetryMax = lo, hi }(ownerRetryMin, ownerRetryMax)
	ownerRetryMin, ownerRetryMax = time.Millisecond, 10*time.Millisecond
	var fail atomic.Bool
	fail.Store(true)
	b := newOwnerBed(t, func() error {
		if fail.Load() {
			return errors.New("etcdserver: request timed out")
		}
		return nil
	}, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-1", OwnerReferences: controlledBy("CronJob", "nightly")}})
	p := ownedPod("nightly-1-x", controlledBy("Job", "nightly-1"), nil)
	if got := b.o.workloadOf(p); got.Kind != "Job" {
		t.Fatalf("named %v, want its Job", got)
	}
	b.settled(t)
	if n := b.gets.Load(); n != ownerTries {
		t.Errorf("%d GETs of a failing API server, want %d", n, ownerTries)
	}
	if got := b.requeues(); len(got) != 0 {
		t.Errorf("requeued %v with no answer", got)
	}
	fail.Store(false)
	if got := b.o.workloadOf(p); got.Kind != "Job" {
		t.Fatalf("named %v before the new answer, want its Job", got)
	}
	b.settled(t)
	if got := b.o.workloadOf(p); got.Kind != "CronJob" || got.Name != "nightly" {
		t.Errorf("after the API server came back: %v, want CronJob/nightly", got)
	}
}

// TestWorkloadOfKeepsAnExpiredAnswerWhileAskingAgain: an answer older
// than ownerTTL still names the pod (its samples do not move to its
// direct owner for a moment) while the owner is asked again.
func TestWorkloadOfKeepsAnExpiredAnswerWhileAskingAgain(t *testing.T) {
	b := newOwnerBed(t, nil, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-1", OwnerReferences: controlledBy("CronJob", "nightly")}})
	p := ownedPod("nightly-1-x", controlledBy("Job", "nightly-1"), nil)
	b.o.workloadOf(p)
	b.settled(t)
	want := report.Workload{Namespace: "shop", Kind: "CronJob", Name: "nightly"}
	if got := b.o.workloadOf(p); got != want {
		t.Fatalf("named %v, want %v", got, want)
	}
	b.o.mu.Lock()
	pr := b.o.parents["uid-nightly-1"]
	pr.at = pr.at.Add(-ownerTTL - time.Minute)
	b.o.parents["uid-nightly-1"] = pr
	b.o.mu.Unlock()
	if got := b.o.workloadOf(p); got != want {
		t.Errorf("with an expired answer: %v, want %v kept", got, want)
	}
	b.settled(t)
	if n := b.gets.Load(); n != 2 {
		t.Errorf("%d GETs, want 2 (the first and the refresh)", n)
	}
	if got := b.requeues(); len(got) != 1 {
		t.Errorf("requeued %v, want only the first answer's requeue (the refresh named it the same)", got)
	}
}
