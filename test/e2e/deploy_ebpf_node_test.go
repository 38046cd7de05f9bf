//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/deploy"
)

// capBits are the capability numbers of deploy.EBPFOOMCapabilities
// (linux/capability.h).
var capBits = map[string]uint{"PERFMON": 38, "BPF": 39}

// TestDeployEBPFOOMOnNode: the DaemonSet with the ebpf-oom component
// (kubectl apply -k, the test bed's overlay; node tier): the agent's
// process holds exactly CAP_BPF and CAP_PERFMON (bounding, permitted and
// effective sets), its eBPF OOM watcher loads inside the container under
// containerd's RuntimeDefault seccomp profile (its "OOM watcher" log line
// says backend bpf), and an OOM kill of a pod under an InPlace policy is
// reported with the victim's pid and name, which the cgroup counters'
// fallback cannot give, and its limit raised.
func TestDeployEBPFOOMOnNode(t *testing.T) {
	ebpfOOMFlow(t, "kubectl apply -k", func(t *testing.T, d *deployBed) {
		d.bed.Components = []string{deploy.ComponentEBPFOOM}
		kustomizeInstaller.install(t, d)
	})
}

// TestDeployEBPFOOMHelmOnNode is TestDeployEBPFOOMOnNode with helm
// install and ebpfOOM.enabled=true (a second values file over the test
// bed's).
func TestDeployEBPFOOMHelmOnNode(t *testing.T) {
	ebpfOOMFlow(t, "helm install", func(t *testing.T, d *deployBed) {
		f := filepath.Join(d.dir, "values-ebpf-oom.json")
		if err := os.WriteFile(f, []byte(`{"ebpfOOM":{"enabled":true}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		d.helm(t, "install", "cgpilot", filepath.Join(d.root, "deploy", "helm", "cgpilot"), "-n", deploy.Namespace, "--create-namespace",
			"-f", d.helmValues(t, "demo"), "-f", f)
	})
}

func ebpfOOMFlow(t *testing.T, how string, install func(*testing.T, *deployBed)) {
	d := startDeployBed(t)
	ctx := context.Background()
	start := time.Now()
	install(t, d)
	agent := d.agentPod(t)
	t.Logf("agent pod Ready %v after %s", time.Since(start).Round(time.Millisecond), how)
	sc := agent.Spec.Containers[0].SecurityContext
	var added []string
	for _, c := range sc.Capabilities.Add {
		added = append(added, string(c))
	}
	if strings.Join(added, ",") != strings.Join(deploy.EBPFOOMCapabilities, ",") || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.Privileged == nil || *sc.Privileged || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("agent pod securityContext %+v: want drop [ALL], add %v, unprivileged, RuntimeDefault seccomp", *sc, deploy.EBPFOOMCapabilities)
	}

	// The process's capability sets, as the runtime set them.
	pid := podProcess(t, string(agent.UID), "/bin/cgpilot-agent")
	var want uint64
	for _, c := range deploy.EBPFOOMCapabilities {
		want |= 1 << capBits[c]
	}
	status := readFile(t, fmt.Sprintf("/proc/%d/status", pid))
	for _, set := range []string{"CapBnd", "CapPrm", "CapEff"} {
		m := regexp.MustCompile(`(?m)^` + set + `:\s*([0-9a-f]+)$`).FindStringSubmatch(status)
		if m == nil {
			t.Fatalf("no %s in /proc/%d/status", set, pid)
		}
		got, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil || got != want {
			t.Errorf("agent process %s %s (%v), want %016x (CAP_BPF, CAP_PERFMON only)", set, m[1], err, want)
		}
	}
	if m := regexp.MustCompile(`(?m)^Seccomp:\s*(\d+)$`).FindStringSubmatch(status); m == nil || m[1] != "2" {
		t.Errorf("agent process Seccomp %v, want 2 (filter: the runtime's default profile)", m)
	}

	// The watcher's backend, from the agent's log.
	var line map[string]any
	within(t, time.Minute, `the agent's "OOM watcher" log line`, func() (bool, string) {
		logs := d.kubectl(t, "logs", "-n", deploy.Namespace, agent.Name)
		for _, l := range strings.Split(logs, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && (m["msg"] == "OOM watcher" || m["msg"] == "OOM watcher unavailable: OOM kills reach the histograms only through the cgroup counters' next sample, and memory is not raised at once") {
				line = m
				return true, ""
			}
		}
		return false, "not logged yet"
	})
	if line["backend"] != "bpf" {
		t.Fatalf("the agent's OOM watcher: %v, want backend bpf", line)
	}
	t.Logf("the agent's OOM watcher: backend %v: %v", line["backend"], line["reason"])

	// An OOM kill, seen by the eBPF program: the Event names the victim.
	policy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": "hog"}, "spec": map[string]any{"mode": "InPlace", "step": "1h", "minHistory": "24h",
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "hog"}}}}}
	within(t, time.Minute, "the RightsizePolicy created", func() (bool, string) {
		_, err := d.dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")).Create(ctx, policy, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	cmd := `n=0; until head -c 157286400 /dev/zero | tail >/dev/null; do n=$((n+1)); echo "attempt $n killed"; sleep 1; done; echo "held 150 MB after $n kills"; exec sleep 3600`
	if _, err := d.cs.CoreV1().Pods("default").Create(ctx, busyboxPod("hog", map[string]string{"app": "hog"}, cmd, rl("100m", "64Mi"), rl("500m", "100Mi")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := regexp.MustCompile(`OOM-killed \(pid [1-9][0-9]* "tail"\)`)
	var killed, raised string
	within(t, 3*time.Minute, "an OOMKilled Event naming the victim's pid and a MemoryRaised Event", func() (bool, string) {
		evs, err := d.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hog"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			switch {
			case e.Reason == "OOMKilled" && victim.MatchString(e.Message):
				killed = e.Message
			case e.Reason == "MemoryRaised":
				raised = e.Message
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return killed != "" && raised != "", strings.Join(seen, "; ")
	})
	t.Logf("OOMKilled: %s; MemoryRaised: %s", killed, raised)
	hog := getPod(t, d.cs, "hog")
	if rc := hog.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Errorf("the hog's container restarted %d times: only the process over the limit is killed on v1", rc)
	}
}
