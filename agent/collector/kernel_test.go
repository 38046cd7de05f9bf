//go:build linux

package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// Kernel tier: sampling real containers (make test-kernel; make test-v2).

func TestMain(m *testing.M) { cgtest.Main(m) }

type roundSink struct{ rounds [][]Sample }

func (s *roundSink) Round(_ time.Time, samples []Sample) {
	s.rounds = append(s.rounds, append([]Sample(nil), samples...))
}

// containerTarget gives a container cgroup of the sandbox as the agent
// gives one (per-controller directories, which package cgroup resolves on
// a node; the sandbox's path may differ between hierarchies).
func containerTarget(t testing.TB, sb *cgtest.Sandbox, uid, rel string) Target {
	t.Helper()
	var d cgroup.Dirs
	if sb.Unified {
		p := sb.Path(cgtest.V2, rel)
		d = cgroup.Dirs{Unified: true, CPU: p, CPUAcct: p, CPUSet: p, Memory: p, PSI: p}
	} else {
		d = cgroup.Dirs{CPU: sb.Path("cpu", rel), CPUAcct: sb.Path("cpuacct", rel), Memory: sb.Path("memory", rel)}
		if _, ok := sb.Dirs[cgtest.V2]; ok {
			d.PSI = sb.Path(cgtest.V2, rel)
		}
	}
	return Target{Key: "ns/Deployment/" + uid + "/app", PodUID: uid, Container: "app", ID: "containerd://" + uid, Dirs: d}
}

// TestKernelCollect: a busy container reads about one core, a container
// holding 64 MiB reads that much working set, every sample of a round has
// the round's time, and an exited container is dropped.
func TestKernelCollect(t *testing.T) {
	tier.Kernel(t)
	sb := cgtest.New(t, "cpu", "cpuacct", "memory")
	busyRel, _ := sb.MkdirPod("cgroupfs", "Burstable", "busy", "app")
	hogRel, _ := sb.MkdirPod("cgroupfs", "Burstable", "hog", "app")
	sb.Start(busyRel+"/app", cgtest.Busy, 0)
	hog := sb.Start(hogRel+"/app", cgtest.Hog, 64)
	target := func(uid, rel string) Target { return containerTarget(t, sb, uid, rel) }
	sink := &roundSink{}
	c := New(Options{Sinks: []Sink{sink}})
	if err := c.Set("busy", []Target{target("busy", busyRel+"/app")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("hog", []Target{target("hog", hogRel+"/app")}); err != nil {
		t.Fatal(err)
	}
	// Wait until the hog has touched its memory.
	deadline := time.Now().Add(20 * time.Second)
	for c.Collect(); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		round := c.Collect()
		var ws uint64
		for _, s := range round {
			if s.Target.PodUID == "hog" {
				ws = s.MemoryWorkingSet
			}
		}
		if ws >= 60<<20 {
			break
		}
	}
	// The busy container's CPU time read from its own files around the
	// round: the reference the sample must match, whatever share of the
	// shared machine the spinning thread got.
	busyDirs := target("busy", busyRel+"/app").Dirs
	c.Collect()
	u1, t1 := cpuUsageNs(t, busyDirs), time.Now()
	time.Sleep(2 * time.Second)
	u2, t2 := cpuUsageNs(t, busyDirs), time.Now()
	round := c.Collect()
	want := float64(u2-u1) / float64(t2.Sub(t1).Nanoseconds())
	if len(round) != 2 {
		t.Fatalf("round of %d samples, want 2", len(round))
	}
	for _, s := range round {
		if !s.Time.Equal(round[0].Time) {
			t.Fatalf("samples of one round at different times: %v and %v", s.Time, round[0].Time)
		}
		switch s.Target.PodUID {
		case "busy":
			// One spinning thread: whatever it got of the shared machine,
			// the sample agrees with the cgroup's own counter over about
			// the same interval (a wrong unit, µs vs ns, is off by 1000).
			if !(want > 0.01) {
				t.Fatalf("the busy container ran %.3f cores over 2 s: the machine starved it, nothing to compare", want)
			}
			if d := s.CPUCores - want; d < -0.1-0.25*want || d > 0.1+0.25*want || s.CPUCores > float64(runtime.NumCPU())+0.1 {
				t.Errorf("busy container: %.3f cores, its cgroup counted %.3f", s.CPUCores, want)
			}
		case "hog":
			if s.MemoryWorkingSet < 60<<20 || s.MemoryWorkingSet > 200<<20 {
				t.Errorf("hog working set %d, want about 64 MiB", s.MemoryWorkingSet)
			}
			if s.CPUCores > 0.5 {
				t.Errorf("sleeping hog uses %.3f cores", s.CPUCores)
			}
		}
	}
	// The hog exits and its cgroup goes: the next round drops it.
	hog.Kill()
	if exited, _ := hog.Wait(10 * time.Second); !exited {
		t.Fatal("hog did not exit")
	}
	for _, key := range []string{"cpu", "cpuacct", "memory", cgtest.V2} {
		if d, ok := sb.Dirs[key]; ok {
			_ = os.Remove(filepath.Join(d, hogRel, "app"))
		}
	}
	c.Collect()
	if n := c.Targets(); n != 1 {
		t.Fatalf("%d targets after the hog's cgroup went, want 1", n)
	}
}

// cpuUsageNs is a container cgroup's CPU time in ns, read from its file
// (cpuacct.usage on v1, cpu.stat usage_usec on v2).
func cpuUsageNs(t testing.TB, d cgroup.Dirs) uint64 {
	t.Helper()
	if d.Unified {
		b, err := os.ReadFile(filepath.Join(d.CPU, "cpu.stat"))
		if err != nil {
			t.Fatal(err)
		}
		var usec uint64
		if _, err := fmt.Sscanf(string(b), "usage_usec %d", &usec); err != nil {
			t.Fatalf("cpu.stat %q: %v", b, err)
		}
		return usec * 1000
	}
	b, err := os.ReadFile(filepath.Join(d.CPUAcct, "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	var ns uint64
	if _, err := fmt.Sscanf(string(b), "%d", &ns); err != nil {
		t.Fatalf("cpuacct.usage %q: %v", b, err)
	}
	return ns
}

// BenchmarkCollect1000 samples 1,000 real container cgroups (no processes)
// per round. The per-round cost against the 10 s interval is the share of
// one core the collector takes (reported as core-share-at-10s).
func BenchmarkCollect1000(b *testing.B) {
	tier.Kernel(b)
	sb := cgtest.New(b, "cpu", "cpuacct", "memory")
	c := New(Options{})
	for i := 0; i < 1000; i++ {
		uid := fmt.Sprintf("p%04d", i)
		rel, _ := sb.MkdirPod("cgroupfs", "Burstable", uid, "app")
		if err := c.Set(uid, []Target{containerTarget(b, sb, uid, rel+"/app")}); err != nil {
			b.Fatal(err)
		}
	}
	if c.Targets() != 1000 {
		b.Fatalf("%d targets", c.Targets())
	}
	c.Collect() // prime
	var ru0, ru1 syscallRusage
	getrusage(&ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Collect()
	}
	b.StopTimer()
	getrusage(&ru1)
	cpu := ru1.cpu() - ru0.cpu()
	perRound := cpu / time.Duration(b.N)
	b.ReportMetric(float64(perRound.Microseconds())/1000, "cpu-ms/round")
	b.ReportMetric(perRound.Seconds()/10*100, "core-%-at-10s")
}

type keySink struct{ keys []string }

func (s *keySink) Round(_ time.Time, samples []Sample) {
	for i := range samples {
		s.keys = append(s.keys, samples[i].Target.Key)
	}
}

// TestKernelKeyChangeDuringRound: a pod's key changing (its owner
// resolved) while sinks read a round does not touch what they read: each
// sample's Target stays as it was when the round sampled it (run with
// -race, as the kernel tier does).
func TestKernelKeyChangeDuringRound(t *testing.T) {
	tier.Kernel(t)
	sb := cgtest.New(t, "cpu", "cpuacct", "memory")
	rel, _ := sb.MkdirPod("cgroupfs", "Burstable", "web", "app")
	sink := &keySink{}
	c := New(Options{Sinks: []Sink{sink}})
	tg := containerTarget(t, sb, "web", rel+"/app")
	if err := c.Set("web", []Target{tg}); err != nil {
		t.Fatal(err)
	}
	c.Collect() // primes
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			tg.Key = fmt.Sprintf("ns/ReplicaSet/web-%d/app", i)
			if err := c.Set("web", []Target{tg}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 20 {
		c.Collect()
	}
	<-done
	if len(sink.keys) != 20 {
		t.Fatalf("%d samples, want 20", len(sink.keys))
	}
	if got := c.Collect(); len(got) != 1 || got[0].Target.Key != tg.Key {
		t.Fatalf("after the changes: %+v, want key %s", got, tg.Key)
	}
}
