// Command cgpilot-agent is the cgpilot node agent (run as a DaemonSet, or as
// a plain process on a host with --kubeconfig).
//
// It only turns flags and the config file into an agent.Config and calls
// agent.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"

	"github.com/cgpilot/cgpilot/agent"
	"github.com/cgpilot/cgpilot/cmd/internal/daemon"
)

// gcPercent is the agent's GOGC unless the environment sets one: the agent
// runs on every node, its live heap is small (about 25 MiB with 1,000
// containers) and its allocation rate low, so collecting at 1.5× the live
// heap instead of 2× saves about 10 MiB per node for a negligible CPU cost
// (BenchmarkAgentFootprint in test/e2e measures both).
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("cgpilot-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := agent.DefaultConfig()
	configFile := fs.String("config", "", "node configuration file (YAML or JSON; see agent.Config)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty = in-cluster service account")
	nodeName := fs.String("node-name", "", "this node's name; default $NODE_NAME (downward API)")
	healthAddr := fs.String("health-addr", def.HealthAddr, "listen address of /healthz, /readyz and /metrics (keep it on 127.0.0.1: the probes use it)")
	metricsAddr := fs.String("metrics-addr", "", "also serve /metrics alone on this address, for a cluster Prometheus (e.g. $(POD_IP):9465); off when empty")
	interrupts := fs.String("path.interrupts", "", "the host's /proc/interrupts when it is not under --path.procfs (mounted alone in an unprivileged container)")
	podResources := fs.String("kubelet-pod-resources", "", "the kubelet's PodResources socket; when set, the kubelet's exclusive CPUs come from it instead of kubeletCPUManagerState")
	socket := fs.String("socket", def.SocketPath, "local API unix socket (mode 0600 in a 0700 directory the agent owns; peers must be uid 0 or in --socket-group-id)")
	socketGroup := fs.Int("socket-group-id", -1, "a group id whose members may use the local API besides root (overrides socketGroupID of the config file); -1: as the config file says (default root only)")
	sysRoot := fs.String("path.sysfs", def.SysRoot, "sysfs mount point")
	procRoot := fs.String("path.procfs", def.ProcRoot, "procfs mount point")
	cgroupRoot := fs.String("cgroup-root", "", "cgroup mount point (overrides the config file)")
	cgroupParent := fs.String("cgroup-parent", "", "kubepods cgroup path from each hierarchy root (overrides the config file)")
	checkpoint := fs.String("checkpoint", "", "checkpoint file (overrides the config file)")
	aggURL := fs.String("aggregator-url", "", "cgpilot-aggregator's HTTPS base URL (overrides aggregator.url of the config file); reports are off while it is empty")
	aggCA := fs.String("aggregator-ca-file", "", "PEM bundle verifying the aggregator's serving certificate (overrides aggregator.caFile)")
	aggToken := fs.String("aggregator-token-file", "", "the agent's projected service-account token for the aggregator, audience cgpilot-aggregator (overrides aggregator.tokenFile)")
	aggPeriod := fs.Duration("aggregator-report-period", 0, "the report grid, the aggregator's --report-period (overrides aggregator.reportPeriod; default 1m)")
	workers := fs.Int("workers", def.WorkerCount, "reconcile workers")
	debug := fs.Bool("debug", false, "debug logging")
	profiling := fs.Bool("profiling", false, "serve Go's /debug/pprof on the health address (127.0.0.1)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := def
	if *configFile != "" {
		var err error
		if cfg, err = agent.LoadConfigFile(*configFile); err != nil {
			fmt.Fprintln(stderr, "cgpilot-agent:", err)
			return 2
		}
	}
	cfg.Kubeconfig, cfg.HealthAddr, cfg.SocketPath = *kubeconfig, *healthAddr, *socket
	cfg.SysRoot, cfg.ProcRoot, cfg.WorkerCount = *sysRoot, *procRoot, *workers
	cfg.MetricsAddr, cfg.InterruptsPath, cfg.KubeletPodResources = *metricsAddr, *interrupts, *podResources
	cfg.NodeName, cfg.Profiling = *nodeName, *profiling
	if *aggPeriod != 0 {
		cfg.Aggregator.ReportPeriod.Duration = *aggPeriod
	}
	if *socketGroup >= 0 {
		cfg.SocketGroupID = socketGroup
	}
	if !*profiling {
		// No heap profile to serve: skip the sampling and its buckets.
		runtime.MemProfileRate = 0
	}
	if cfg.NodeName == "" {
		cfg.NodeName = os.Getenv("NODE_NAME")
	}
	for _, o := range []struct {
		v   string
		dst *string
	}{{*cgroupRoot, &cfg.CgroupRoot}, {*cgroupParent, &cfg.CgroupParent}, {*checkpoint, &cfg.CheckpointPath},
		{*aggURL, &cfg.Aggregator.URL}, {*aggCA, &cfg.Aggregator.CAFile}, {*aggToken, &cfg.Aggregator.TokenFile}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	if err := cfg.Validate(); err != nil { // the file and the flags over it
		fmt.Fprintln(stderr, "cgpilot-agent:", err)
		return 2
	}
	return daemon.Run("cgpilot-agent", *debug, stderr, func(ctx context.Context, log logr.Logger) int {
		start := time.Now()
		if err := agent.Run(ctx, cfg, log); err != nil {
			log.Error(err, "agent stopped", "after", time.Since(start).String())
			return 1
		}
		return 0
	})
}
