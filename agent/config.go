//go:build linux

package agent

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("invalid cgpilot config")

// Config is the agent's configuration: the node configuration file
// (YAML or JSON, strict) plus what flags and the environment add.
type Config struct {
	// ReservedCPUs are never given to pods (system daemons run there).
	ReservedCPUs string `json:"reservedCPUs,omitempty"`
	// ExclusiveCap is the largest fraction of the allocatable CPUs
	// (all − reserved) that exclusive pods may hold together. Default 2/3.
	ExclusiveCap *float64 `json:"exclusiveCap,omitempty"`
	// OvercommitRatio enables the sellable rule when > 0: exclusive CPUs
	// are at most min(allocatable − 2 × largest shared pod,
	// (allocatable − CPUs sold to shared pods) / OvercommitRatio).
	OvercommitRatio float64 `json:"overcommitRatio,omitempty"`
	// ManagedNamespaces limits the agent to these namespaces; empty = all.
	ManagedNamespaces []string `json:"managedNamespaces,omitempty"`
	// IgnoredNamespaces are never touched. Default: kube-system.
	IgnoredNamespaces []string `json:"ignoredNamespaces,omitempty"`

	// CheckpointPath is the host file holding the exclusive allocations.
	CheckpointPath string `json:"checkpointPath,omitempty"`
	// KubeletCPUManagerState is the kubelet's cpu_manager_state file;
	// a missing file means no static assignments.
	KubeletCPUManagerState string `json:"kubeletCPUManagerState,omitempty"`
	// CgroupRoot is where the v1 hierarchies (or the v2 tree) are mounted.
	CgroupRoot string `json:"cgroupRoot,omitempty"`
	// CgroupParent is the kubepods cgroup as a path from each hierarchy's
	// root (cgroupfs driver: "/kubepods"). Tests point it at their own parent.
	CgroupParent string `json:"cgroupParent,omitempty"`
	// SweepInterval is how long the safety-net sweep takes to check every
	// pod's cgroups once (changes arrive as events: the pod informer, the
	// cgroup watch; the sweep covers what an event could not bring). It
	// checks a slice of the pods every SweepInterval/30, at least 10 s
	// apart: the default 5m checks a thirtieth of the pods every 10 s.
	SweepInterval metav1.Duration `json:"sweepInterval,omitempty"`
	// CPUs overrides the node's online CPUs (tests on a small machine);
	// empty = read from the cpuset root.
	CPUs string `json:"cpus,omitempty"`
	// SocketGroupID, when set, is a group whose members may use the local
	// API socket besides root (its directory becomes 0710 and the socket
	// 0660, both of that group; peers are checked by their credentials).
	// Unset: root only.
	SocketGroupID *int `json:"socketGroupID,omitempty"`
	// Rightsizing configures sampling, the recommender's state, the usage
	// history and the OOM watcher.
	Rightsizing RightsizeConfig `json:"rightsizing,omitempty"`
	// Aggregator configures the reports to the cluster aggregator; off
	// while its URL is empty.
	Aggregator AggregatorConfig `json:"aggregator,omitempty"`

	// Set by flags and the environment, not by the file.
	NodeName   string `json:"-"`
	Kubeconfig string `json:"-"`
	HealthAddr string `json:"-"` // 127.0.0.1:port for /healthz, /readyz, /metrics
	// MetricsAddr, when set, serves /metrics alone on an address a
	// cluster Prometheus can reach (the pod IP under hostNetwork).
	MetricsAddr string `json:"-"`
	// Profiling serves Go's /debug/pprof on HealthAddr.
	Profiling bool `json:"-"`
	// InterruptsPath is the host's /proc/interrupts when it is not under
	// ProcRoot (an unprivileged container sees a masked copy there).
	InterruptsPath string `json:"-"`
	// KubeletPodResources is the kubelet's PodResources socket: when set,
	// the kubelet's exclusive CPUs come from it instead of
	// KubeletCPUManagerState.
	KubeletPodResources string        `json:"-"`
	SocketPath          string        `json:"-"` // local API, mode 0600 (0660 with SocketGroupID)
	SysRoot             string        `json:"-"` // for topology discovery
	ProcRoot            string        `json:"-"`
	WorkerCount         int           `json:"-"`
	ResyncPeriod        time.Duration `json:"-"`
}

// RightsizeConfig configures right-sizing on the node.
type RightsizeConfig struct {
	// Enabled turns sampling, recommendations and changes on (default).
	Enabled *bool `json:"enabled,omitempty"`
	// SampleInterval is how often every container is sampled.
	SampleInterval metav1.Duration `json:"sampleInterval,omitempty"`
	// StateDir holds the recommenders' checkpoints and the usage history.
	StateDir string `json:"stateDir,omitempty"`
	// CheckpointInterval is how often the histograms are checkpointed
	// (and at shutdown).
	CheckpointInterval metav1.Duration `json:"checkpointInterval,omitempty"`
	// HistoryRetention and HistoryMaxBytes bound the usage history.
	HistoryRetention metav1.Duration `json:"historyRetention,omitempty"`
	HistoryMaxBytes  int64           `json:"historyMaxBytes,omitempty"`
	// OOMWatch is how OOM kills are seen: auto (eBPF, else the cgroups'
	// counters), bpf, counters, or off.
	OOMWatch string `json:"oomWatch,omitempty"`
	// ForgetAfter is how long the histograms of a workload container are
	// kept once no pod of this node runs it (a Deployment scaled to zero,
	// a workload rescheduled elsewhere): long enough to bridge a rollout
	// or a restart, short enough that churn does not grow the state.
	ForgetAfter metav1.Duration `json:"forgetAfter,omitempty"`
}

// AggregatorConfig configures the agent's reports to cgpilot-aggregator
// and its use of the merged recommendations (flags override the file).
type AggregatorConfig struct {
	// URL is the aggregator's HTTPS base URL
	// (https://cgpilot-aggregator.cgpilot-system.svc); empty: no reports,
	// the agent's own recommendations only.
	URL string `json:"url,omitempty"`
	// CAFile verifies the aggregator's serving certificate; empty: the
	// system roots.
	CAFile string `json:"caFile,omitempty"`
	// TokenFile is the agent's projected service-account token with the
	// aggregator's audience, re-read when the kubelet rotates it.
	TokenFile string `json:"tokenFile,omitempty"`
	// ReportPeriod is the report grid; it must be the aggregator's
	// --report-period (default 60s).
	ReportPeriod metav1.Duration `json:"reportPeriod,omitempty"`
	// MaxBufferBytes bounds the reports kept while the aggregator is away
	// (default 8 MiB; older reports are merged, not dropped).
	MaxBufferBytes int `json:"maxBufferBytes,omitempty"`
}

// on says whether the agent reports.
func (a AggregatorConfig) on() bool { return a.URL != "" }

// on says whether right-sizing runs.
func (r RightsizeConfig) on() bool { return r.Enabled == nil || *r.Enabled }

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	capFraction := 2.0 / 3.0
	return Config{
		ExclusiveCap:           &capFraction,
		IgnoredNamespaces:      []string{"kube-system"},
		CheckpointPath:         "/var/lib/cgpilot/cpu_pools.checkpoint",
		KubeletCPUManagerState: "/var/lib/kubelet/cpu_manager_state",
		CgroupRoot:             "/sys/fs/cgroup",
		CgroupParent:           "/kubepods",
		SweepInterval:          metav1.Duration{Duration: 5 * time.Minute},
		Rightsizing: RightsizeConfig{
			SampleInterval:     metav1.Duration{Duration: 10 * time.Second},
			StateDir:           "/var/lib/cgpilot",
			CheckpointInterval: metav1.Duration{Duration: 5 * time.Minute},
			HistoryRetention:   metav1.Duration{Duration: 14 * 24 * time.Hour},
			HistoryMaxBytes:    256 << 20,
			OOMWatch:           "auto",
			ForgetAfter:        metav1.Duration{Duration: 24 * time.Hour},
		},
		Aggregator:  AggregatorConfig{ReportPeriod: metav1.Duration{Duration: time.Minute}, MaxBufferBytes: 8 << 20},
		HealthAddr:  "127.0.0.1:9464",
		SocketPath:  local.DefaultSocket,
		SysRoot:     "/sys",
		ProcRoot:    "/proc",
		WorkerCount: 2,
	}
}

// LoadConfigFile applies a config file over DefaultConfig. Unknown fields
// are errors, so a typo never silently falls back to a default.
func LoadConfigFile(path string) (Config, error) {
	c := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, path, err)
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks every field; the error names the field and the value.
func (c Config) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalidConfig, field, v, why)
	}
	if _, err := cpulist.Parse(c.ReservedCPUs); err != nil {
		return bad("reservedCPUs", c.ReservedCPUs, "want a cpu list like 0-1,8 ("+err.Error()+")")
	}
	if c.CPUs != "" {
		all, err := cpulist.Parse(c.CPUs)
		if err != nil || all.IsEmpty() {
			return bad("cpus", c.CPUs, "want a non-empty cpu list")
		}
		if r, _ := cpulist.Parse(c.ReservedCPUs); !r.IsSubsetOf(all) || r.Equals(all) {
			return bad("reservedCPUs", c.ReservedCPUs, "must be a strict subset of cpus "+c.CPUs)
		}
	}
	if c.ExclusiveCap == nil || !(*c.ExclusiveCap >= 0 && *c.ExclusiveCap <= 1) {
		return bad("exclusiveCap", ptrString(c.ExclusiveCap), "want a fraction in [0, 1]")
	}
	if !(c.OvercommitRatio == 0 || (c.OvercommitRatio >= 1 && c.OvercommitRatio <= 100)) {
		return bad("overcommitRatio", c.OvercommitRatio, "want 0 (off) or a ratio in [1, 100]")
	}
	for _, f := range []struct{ name, v string }{
		{"checkpointPath", c.CheckpointPath}, {"cgroupRoot", c.CgroupRoot},
	} {
		if !filepath.IsAbs(f.v) {
			return bad(f.name, f.v, "want an absolute path")
		}
	}
	for _, f := range []struct{ name, v string }{{"--path.interrupts", c.InterruptsPath}, {"--kubelet-pod-resources", c.KubeletPodResources}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			return bad(f.name, f.v, "want an absolute path or empty")
		}
	}
	if c.KubeletCPUManagerState != "" && !filepath.IsAbs(c.KubeletCPUManagerState) {
		return bad("kubeletCPUManagerState", c.KubeletCPUManagerState, "want an absolute path or empty")
	}
	if !filepath.IsAbs(c.CgroupParent) || filepath.Clean(c.CgroupParent) != c.CgroupParent || c.CgroupParent == "/" {
		return bad("cgroupParent", c.CgroupParent, "want a clean absolute path from each hierarchy's root, not /")
	}
	if g := c.SocketGroupID; g != nil && (*g < 0 || *g > math.MaxInt32) {
		return bad("socketGroupID", *g, "want a group id from 0 to 2147483647, or unset for root only")
	}
	if c.SweepInterval.Duration < 100*time.Millisecond || c.SweepInterval.Duration > time.Hour {
		return bad("sweepInterval", c.SweepInterval.Duration, "want 100ms to 1h")
	}
	rs := c.Rightsizing
	switch {
	case rs.SampleInterval.Duration < time.Second || rs.SampleInterval.Duration > 10*time.Minute:
		return bad("rightsizing.sampleInterval", rs.SampleInterval.Duration, "want 1s to 10m")
	case !filepath.IsAbs(rs.StateDir):
		return bad("rightsizing.stateDir", rs.StateDir, "want an absolute path")
	case rs.CheckpointInterval.Duration < time.Second || rs.CheckpointInterval.Duration > 24*time.Hour:
		return bad("rightsizing.checkpointInterval", rs.CheckpointInterval.Duration, "want 1s to 24h")
	case rs.HistoryRetention.Duration < time.Hour || rs.HistoryRetention.Duration > 90*24*time.Hour:
		return bad("rightsizing.historyRetention", rs.HistoryRetention.Duration, "want 1h to 2160h")
	case rs.HistoryMaxBytes < 1<<20 || rs.HistoryMaxBytes > 64<<30:
		return bad("rightsizing.historyMaxBytes", rs.HistoryMaxBytes, "want 1 MiB to 64 GiB")
	case rs.ForgetAfter.Duration < time.Minute || rs.ForgetAfter.Duration > 90*24*time.Hour:
		return bad("rightsizing.forgetAfter", rs.ForgetAfter.Duration, "want 1m to 2160h")
	}
	switch rs.OOMWatch {
	case "auto", "bpf", "counters", "off":
	default:
		return bad("rightsizing.oomWatch", rs.OOMWatch, "want auto, bpf, counters or off")
	}
	if err := c.Aggregator.validate(bad); err != nil {
		return err
	}
	for _, ns := range append(append([]string{}, c.ManagedNamespaces...), c.IgnoredNamespaces...) {
		if ns == "" {
			return bad("namespaces", `""`, "empty namespace name")
		}
	}
	return nil
}

func (a AggregatorConfig) validate(bad func(string, any, string) error) error {
	p := a.ReportPeriod.Duration
	switch {
	case p < 10*time.Second || p > time.Hour || p%time.Second != 0 || (24*time.Hour)%p != 0:
		return bad("aggregator.reportPeriod", p, "want whole seconds from 10s to 1h that divide a day, the aggregator's --report-period")
	case a.MaxBufferBytes < 64<<10 || a.MaxBufferBytes > 1<<30:
		return bad("aggregator.maxBufferBytes", a.MaxBufferBytes, "want 64 KiB to 1 GiB")
	case a.URL == "":
		return nil
	}
	u, err := url.Parse(a.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return bad("aggregator.url", a.URL, "want https://host[:port] (the agent sends its token only over TLS)")
	}
	if a.TokenFile == "" || !filepath.IsAbs(a.TokenFile) {
		return bad("aggregator.tokenFile", a.TokenFile, "want the absolute path of the projected token (audience cgpilot-aggregator)")
	}
	if a.CAFile != "" && !filepath.IsAbs(a.CAFile) {
		return bad("aggregator.caFile", a.CAFile, "want an absolute path or empty (the system roots)")
	}
	return nil
}

func ptrString(f *float64) string {
	if f == nil {
		return "<unset>"
	}
	return fmt.Sprint(*f)
}

// socketGID is the local API's group, -1 for root only.
func (c Config) socketGID() int {
	if c.SocketGroupID == nil {
		return -1
	}
	return *c.SocketGroupID
}

// reserved returns the parsed reserved set (Validate has checked it).
func (c Config) reserved() cpuset.CPUSet {
	r, _ := cpulist.Parse(c.ReservedCPUs)
	return r
}

// manages reports whether pods of namespace ns are the agent's business.
func (c Config) manages(ns string) bool {
	for _, n := range c.IgnoredNamespaces {
		if n == ns {
			return false
		}
	}
	if len(c.ManagedNamespaces) == 0 {
		return true
	}
	for _, n := range c.ManagedNamespaces {
		if n == ns {
			return true
		}
	}
	return false
}
