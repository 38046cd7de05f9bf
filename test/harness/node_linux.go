//go:build linux

package harness

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgpilot/cgpilot/test/images"
)

// NodeOptions configure a real node.
type NodeOptions struct {
	// Name of the Node object (default "cgpilot-node").
	Name string
	// ReadyTimeout bounds the wait for Node Ready (default 3 min).
	ReadyTimeout time.Duration
	// LockTimeout bounds the wait for another harness node on this
	// machine to finish (default 10 min): kubepods, the kubelet's
	// device-plugin socket and the pod subnet exist once per host.
	LockTimeout time.Duration
	// Busybox is the static busybox binary for the busybox image
	// (default /bin/busybox from busybox-static).
	Busybox string
	// NodeIP is the node's InternalIP, where its kubelet serves and the
	// API server dials it for logs, exec and port-forward (default
	// DefaultNodeIP). When no interface holds it, StartNode adds it to the
	// loopback device as a /32 (so nothing outside this host routes to
	// it) and teardown removes it. The kubelet refuses a 127/8 node IP.
	NodeIP string
	// StaticCPUManager starts the kubelet with cpuManagerPolicy static:
	// containers of Guaranteed pods with integer CPU requests get
	// exclusive CPUs, recorded in CPUManagerStateFile and written to their
	// cpusets; every other container gets the shared pool.
	StaticCPUManager bool
	// ReservedCPUs is the kubelet's reservedSystemCPUs with
	// StaticCPUManager (default "0"): never exclusive, and taken out of the
	// node's allocatable CPU (on a 2-CPU host, 1 CPU is left to pods).
	ReservedCPUs string
	// FeatureGates are the kubelet's featureGates.
	FeatureGates map[string]bool
	// RuntimeBinDir holds the container runtime the node runs: containerd
	// 2, containerd-shim-runc-v2, ctr and runc (default
	// $CGPILOT_RUNTIME_BINS, which make test-e2e and make demo set from
	// test/runtimebins/build.sh). The node uses nothing of the runtime on
	// PATH.
	RuntimeBinDir string
	// Snapshotter is containerd's snapshotter for the CRI's images
	// (default $CGPILOT_NODE_SNAPSHOTTER, else "overlayfs"); "native"
	// (copies) runs where the kernel has no overlayfs.
	Snapshotter string
	// NoPivotRoot makes runc enter containers with MS_MOVE and chroot
	// instead of pivot_root (runc's --no-pivot; default true when
	// $CGPILOT_NODE_NO_PIVOT is 1). pivot_root fails with EINVAL when the
	// host's root is the initramfs, as in the cgroup v2 VM; runc documents
	// --no-pivot for exactly that case.
	NoPivotRoot bool
	// PauseArchive is a prebuilt pause image archive (default
	// $CGPILOT_PAUSE_ARCHIVE); empty builds it with the go command, which
	// the cgroup v2 VM does not have.
	PauseArchive string
}

// Environment defaults of NodeOptions, for tests that run a node where the
// harness cannot choose (the cgroup v2 VM).
const (
	SnapshotterEnv  = "CGPILOT_NODE_SNAPSHOTTER"
	NoPivotRootEnv  = "CGPILOT_NODE_NO_PIVOT"
	PauseArchiveEnv = "CGPILOT_PAUSE_ARCHIVE"
)

// RuntimeBinsEnv names the environment variable with the default of
// NodeOptions.RuntimeBinDir.
const RuntimeBinsEnv = "CGPILOT_RUNTIME_BINS"

// runtimeBins are the programs NodeOptions.RuntimeBinDir must hold.
var runtimeBins = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// DefaultNodeIP is a harness node's InternalIP: an address of TEST-NET-2
// (RFC 5737), which no network routes, so that adding it to the loopback
// device exposes nothing.
const DefaultNodeIP = "198.51.100.2"

// NodeState is the record of a node: what it started and what the host
// looked like before, for teardown.
type NodeState struct {
	Name        string            `json:"name"`
	Dir         string            `json:"dir"`
	Socket      string            `json:"socket"`
	RuntimeBins string            `json:"runtimeBins"` // NodeOptions.RuntimeBinDir
	Procs       []ProcRecord      `json:"procs"`       // containerd, kubelet
	Ports       map[string]int    `json:"ports"`
	Marks       []PathMark        `json:"marks"`
	MountsPrior []string          `json:"mountsPrior"`
	LinksPrior  []string          `json:"linksPrior"`
	Sysctls     map[string]string `json:"sysctls"`
	CgroupRoots []string          `json:"cgroupRoots"` // hierarchy mount points
	Lock        string            `json:"lock"`
	NodeIP      string            `json:"nodeIP"`
	// AddedAddrs are addresses StartNode added ("IP/32 dev lo"), recorded
	// before it added them; teardown deletes them.
	AddedAddrs []string `json:"addedAddrs,omitempty"`
}

// Node is a running containerd + kubelet registered with a ControlPlane.
type Node struct {
	cp      *ControlPlane
	State   *NodeState
	Started time.Duration // until Node Ready
	opts    NodeOptions
}

// NodeLockFile exists while a harness node runs on this host; it holds the
// test bed's directory (for `testbed down --dir`).
const NodeLockFile = "/run/cgpilot-testnode.lock"

// nodeLockPath is NodeLockFile, a variable only for the lock's unit test.
var nodeLockPath = NodeLockFile

const podSubnet = "10.244.0.0/24"

// KubepodsRoots are the kubelet's top cgroups in every hierarchy.
func (n *Node) KubepodsRoots() []string {
	out := make([]string, 0, len(n.State.CgroupRoots))
	for _, r := range n.State.CgroupRoots {
		out = append(out, filepath.Join(r, "kubepods"))
	}
	return out
}

// Name is the Node object's name.
func (n *Node) Name() string { return n.State.Name }

// NodeIP is the node's InternalIP, where its kubelet serves.
func (n *Node) NodeIP() string { return n.State.NodeIP }

// KubeletRootDir is the kubelet's --root-dir (its /var/lib/kubelet).
func (n *Node) KubeletRootDir() string { return filepath.Join(n.State.Dir, "kubelet") }

// CPUManagerStateFile is the kubelet's CPU manager checkpoint
// (cpu_manager_state in its root directory).
func (n *Node) CPUManagerStateFile() string {
	return filepath.Join(n.KubeletRootDir(), "cpu_manager_state")
}

// Options are the options the node's kubelet runs with now.
func (n *Node) Options() NodeOptions { return n.opts }

// ImportImage imports a docker-archive into the node's containerd (k8s.io
// namespace), for images beyond pause and busybox (the agent image).
func (n *Node) ImportImage(ctx context.Context, tarPath string) error {
	return ctrImport(ctx, n.State.RuntimeBins, n.State.Socket, tarPath)
}

// Ctr is the node's ctr, talking to its containerd in the CRI (k8s.io)
// namespace, with args after the global options.
func (n *Node) Ctr(ctx context.Context, args ...string) *exec.Cmd {
	return ctrCommand(ctx, n.State.RuntimeBins, n.State.Socket, args...)
}

func ctrCommand(ctx context.Context, runtimeBins, sock string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(runtimeBins, "ctr"), append([]string{"--address", sock, "-n", "k8s.io"}, args...)...)
}

// missingDeps names what the node needs from the host and how to get it.
func missingDeps(binDir, runtimeDir string) error {
	var miss []string
	if _, err := os.Stat(filepath.Join(binDir, "kubelet")); err != nil {
		miss = append(miss, "kubelet in "+binDir+" (test/k8sbins/build.sh)")
	}
	if runtimeDir == "" {
		miss = append(miss, "the container runtime (test/runtimebins/build.sh, or set "+RuntimeBinsEnv+")")
	} else {
		for _, b := range runtimeBins {
			if _, err := os.Stat(filepath.Join(runtimeDir, b)); err != nil {
				miss = append(miss, b+" in "+runtimeDir+" (test/runtimebins/build.sh)")
			}
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		miss = append(miss, "ip (iproute2)")
	}
	if cniBinDir() == "" {
		miss = append(miss, "CNI plugins ptp, host-local, loopback (containernetworking-plugins)")
	}
	if len(miss) > 0 {
		return fmt.Errorf("%w: node needs %s: run make deps", ErrStart, strings.Join(miss, ", "))
	}
	return nil
}

func cniBinDir() string {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		ok := true
		for _, p := range []string{"ptp", "host-local", "loopback"} {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// acquireNodeLock creates NodeLockFile exclusively, waiting while another
// live harness node holds it. The file holds the test bed's directory and
// the owner's PID and start time.
func acquireNodeLock(ctx context.Context, dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	st, _ := procStartTime(os.Getpid())
	for {
		f, err := os.OpenFile(nodeLockPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, werr := fmt.Fprintf(f, "%s\n%d %d\n", dir, os.Getpid(), st)
			f.Close()
			if werr != nil {
				os.Remove(nodeLockPath)
				return fmt.Errorf("%w: write %s: %v", ErrStart, nodeLockPath, werr)
			}
			return nil
		}
		if !os.IsExist(err) {
			return fmt.Errorf("%w: node lock %s: %v", ErrStart, nodeLockPath, err)
		}
		holder, owner := readNodeLock()
		if !owner.Alive() && !nodeAlive(holder) {
			return fmt.Errorf("%w: %s names %q, whose node is not running (a crashed run?): clean it up with `go run ./test/cmd/testbed down --dir %s`", ErrStart, nodeLockPath, holder, holder)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: another harness node (%s) still runs after %v", ErrStart, holder, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for node lock: %v", ErrStart, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// readNodeLock returns the directory and owner recorded in NodeLockFile.
func readNodeLock() (string, ProcRecord) {
	b, _ := os.ReadFile(nodeLockPath)
	dir, rest, _ := strings.Cut(string(b), "\n")
	var owner ProcRecord
	if _, err := fmt.Sscanf(rest, "%d %d", &owner.PID, &owner.StartTime); err != nil || owner.PID <= 0 {
		owner = ProcRecord{PID: -1}
	}
	return strings.TrimSpace(dir), owner
}

// nodeAlive reports whether the test bed in dir has a live node process
// (a detached testbed node outlives the process that took the lock).
func nodeAlive(dir string) bool {
	s, err := LoadState(dir)
	if err != nil || s.Node == nil {
		return false
	}
	for _, p := range s.Node.Procs {
		if p.Alive() {
			return true
		}
	}
	return false
}

// StartNode starts containerd and a kubelet registered as opts.Name with
// cp, imports the pause and busybox images, and waits for Node Ready.
// Needs root. On error everything it did is undone.
func StartNode(ctx context.Context, cp *ControlPlane, o NodeOptions) (n *Node, err error) {
	t0 := time.Now()
	if o.Name == "" {
		o.Name = "cgpilot-node"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = 10 * time.Minute
	}
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	if o.NodeIP == "" {
		o.NodeIP = DefaultNodeIP
	}
	if o.RuntimeBinDir == "" {
		o.RuntimeBinDir = os.Getenv(RuntimeBinsEnv)
	}
	if o.Snapshotter == "" {
		o.Snapshotter = os.Getenv(SnapshotterEnv)
	}
	if o.Snapshotter == "" {
		o.Snapshotter = "overlayfs"
	}
	if !o.NoPivotRoot {
		o.NoPivotRoot = os.Getenv(NoPivotRootEnv) == "1"
	}
	if o.PauseArchive == "" {
		o.PauseArchive = os.Getenv(PauseArchiveEnv)
	}
	if ip := net.ParseIP(o.NodeIP); ip == nil || ip.To4() == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return nil, fmt.Errorf("%w: node IP %q: want an IPv4 address the kubelet accepts (not loopback or unspecified)", ErrStart, o.NodeIP)
	}
	if o.StaticCPUManager && o.ReservedCPUs == "" {
		o.ReservedCPUs = "0"
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: a node needs root", ErrStart)
	}
	if err := missingDeps(cp.BinDir(), o.RuntimeBinDir); err != nil {
		return nil, err
	}
	st := cp.State
	st.mu.Lock()
	if st.Node != nil || st.tornDown {
		st.mu.Unlock()
		return nil, fmt.Errorf("%w: test bed %s already has a node or is torn down", ErrStart, st.Dir)
	}
	st.mu.Unlock()
	if err := acquireNodeLock(ctx, st.Dir, o.LockTimeout); err != nil {
		return nil, err
	}
	roots, err := cgroupMounts()
	if err != nil {
		os.Remove(NodeLockFile)
		return nil, fmt.Errorf("%w: cgroup mounts: %v", ErrStart, err)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, "kubepods")); err == nil {
			os.Remove(NodeLockFile)
			return nil, fmt.Errorf("%w: %s/kubepods exists: another kubelet runs on this host, or a run leaked it; the harness removes only cgroups it created", ErrStart, r)
		}
	}
	ms, err := readMounts()
	if err != nil {
		os.Remove(NodeLockFile)
		return nil, fmt.Errorf("%w: mountinfo: %v", ErrStart, err)
	}
	dir := filepath.Join(st.Dir, "node")
	ns := &NodeState{
		Name: o.Name, Dir: dir, Socket: filepath.Join(dir, "containerd", "containerd.sock"), RuntimeBins: o.RuntimeBinDir,
		Ports: map[string]int{}, LinksPrior: netLinks(), Sysctls: readSysctls(), CgroupRoots: roots, Lock: NodeLockFile,
		NodeIP: o.NodeIP,
	}
	if !hostHasIP(o.NodeIP) {
		ns.AddedAddrs = []string{o.NodeIP + "/32 dev lo"}
	}
	for _, m := range ms {
		ns.MountsPrior = append(ns.MountsPrior, m.Point)
	}
	for _, p := range hostPaths {
		ns.Marks = append(ns.Marks, markPath(p))
	}
	// From here on teardown knows how to undo everything.
	st.mu.Lock()
	st.Node = ns
	err = st.save()
	st.mu.Unlock()
	if err != nil {
		os.Remove(NodeLockFile)
		st.Node = nil
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	defer func() {
		if err != nil {
			if terr := teardownNodeLocked(st); terr != nil {
				err = errors.Join(err, terr)
			}
		}
	}()
	n = &Node{cp: cp, State: ns, opts: o}
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "images", "runc", "opt", "logs", "pki"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	for _, a := range ns.AddedAddrs {
		if err := ipAddr("add", a); err != nil {
			return nil, fmt.Errorf("%w: node IP: %v", ErrStart, err)
		}
	}
	// The kubelet's serving certificate, for the API server's TLS check.
	if _, _, err := cp.pki.issue(n.kubeletCertFile(), n.kubeletKeyFile(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: o.Name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{o.Name},
		IPAddresses: []net.IP{net.ParseIP(o.NodeIP)},
	}); err != nil {
		return nil, err
	}
	pauseTar, busyboxTar := filepath.Join(dir, "images", "pause.tar"), filepath.Join(dir, "images", "busybox.tar")
	if o.PauseArchive != "" {
		pauseTar = o.PauseArchive
	} else if err := images.Pause(ctx, pauseTar); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	if err := images.Busybox(ctx, o.Busybox, busyboxTar); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	if err := n.writeConfigs(cp); err != nil {
		return nil, err
	}
	// The runtime's directory first on containerd's PATH, so that nothing
	// it runs comes from the host (the shim and runc are named by absolute
	// path in its configuration too).
	env := []string{"PATH=" + o.RuntimeBinDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	if err := n.start("containerd", env, filepath.Join(o.RuntimeBinDir, "containerd"), "--config", filepath.Join(dir, "containerd", "config.toml")); err != nil {
		return nil, err
	}
	if err := n.waitContainerd(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	for _, tar := range []string{pauseTar, busyboxTar} {
		if err := ctrImport(ctx, ns.RuntimeBins, ns.Socket, tar); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, o.ReadyTimeout, time.Time{}); err != nil {
		return nil, err
	}
	n.Started = time.Since(t0)
	cp.opts.Logf("harness: node %s Ready after %v", o.Name, n.Started.Round(time.Millisecond))
	return n, nil
}

func (n *Node) start(name string, env []string, bin string, args ...string) error {
	rec, err := startProc(name, filepath.Join(n.State.Dir, "logs", name+".log"), n.cp.opts.Detach, env, bin, args...)
	if err != nil {
		return err
	}
	st := n.cp.State
	st.mu.Lock()
	defer st.mu.Unlock()
	if old := findProc(n.State.Procs, name); old != nil {
		*old = rec // a restart: the old one is stopped
	} else {
		n.State.Procs = append(n.State.Procs, rec)
	}
	return st.save()
}

// startKubelet writes the kubelet's configuration from n.opts, clears a CPU
// manager checkpoint of another policy and starts the kubelet.
func (n *Node) startKubelet() error {
	if err := n.writeKubeletConfig(); err != nil {
		return err
	}
	policy := "none"
	if n.opts.StaticCPUManager {
		policy = "static"
	}
	if removed, err := clearStaleCPUManagerState(n.CPUManagerStateFile(), policy); err != nil {
		return err
	} else if removed != "" {
		n.cp.opts.Logf("harness: removed %s of policy %q: the kubelet refuses to start on a checkpoint of another policy than %q", n.CPUManagerStateFile(), removed, policy)
	}
	dir := n.State.Dir
	return n.start("kubelet", nil, filepath.Join(n.cp.BinDir(), "kubelet"),
		"--config="+filepath.Join(dir, "kubelet-config.yaml"),
		"--kubeconfig="+n.cp.State.Kubeconfig,
		"--root-dir="+n.KubeletRootDir(),
		"--cert-dir="+filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override="+n.opts.Name,
		"--node-ip="+n.State.NodeIP,
	)
}

// RestartKubelet stops the kubelet, lets change edit the node's options
// (StaticCPUManager, ReservedCPUs, FeatureGates; Name, NodeIP and the
// start-up options cannot change), starts it again and waits until it has
// reported the Node Ready. Pods keep running meanwhile, as with a kubelet
// upgrade. Switching the CPU manager policy removes the old policy's
// checkpoint, which the kubelet would otherwise refuse.
func (n *Node) RestartKubelet(ctx context.Context, change func(*NodeOptions)) error {
	o := n.opts
	if change != nil {
		change(&o)
	}
	if o.Name != n.opts.Name || o.NodeIP != n.opts.NodeIP || o.Busybox != n.opts.Busybox || o.RuntimeBinDir != n.opts.RuntimeBinDir {
		return fmt.Errorf("%w: a kubelet restart cannot change the node's name, IP, images or runtime", ErrStart)
	}
	if o.StaticCPUManager && o.ReservedCPUs == "" {
		o.ReservedCPUs = "0"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	rec := n.proc("kubelet")
	if rec == nil {
		return fmt.Errorf("%w: no kubelet recorded for node %s", ErrStart, n.Name())
	}
	if err := rec.Stop(15 * time.Second); err != nil {
		return fmt.Errorf("harness: stop kubelet: %w", err)
	}
	since := time.Now()
	n.opts = o
	appendLine(rec.Log, "--- harness: restarting the kubelet at "+since.Format(time.RFC3339Nano))
	if err := n.startKubelet(); err != nil {
		return err
	}
	return n.waitReady(ctx, o.ReadyTimeout, since)
}

// PID is the process id of the node's process name ("containerd",
// "kubelet"), when the node recorded one and it is still that process
// (ProcRecord.Alive: a reused pid is not taken for it). A benchmark reads
// its CPU time and RSS from /proc/PID.
func (n *Node) PID(name string) (int, bool) {
	rec := n.proc(name)
	if rec == nil || !rec.Alive() {
		return 0, false
	}
	return rec.PID, true
}

func (n *Node) proc(name string) *ProcRecord {
	for i := range n.State.Procs {
		if n.State.Procs[i].Name == name {
			return &n.State.Procs[i]
		}
	}
	return nil
}

func (n *Node) writeConfigs(cp *ControlPlane) error {
	dir := n.State.Dir
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	// The kubelet's configuration is written by startKubelet.
	n.State.Ports["kubelet"], n.State.Ports["kubelet-healthz"] = ports[0], ports[1]
	files := map[string]string{
		filepath.Join(dir, "containerd", "config.toml"): fmt.Sprintf(containerdConfig,
			filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"),
			n.State.Socket, n.State.Socket+".ttrpc", filepath.Join(dir, "opt"),
			n.opts.Snapshotter, images.PauseRef, filepath.Join(n.State.RuntimeBins, "containerd-shim-runc-v2"),
			n.opts.NoPivotRoot, filepath.Join(n.State.RuntimeBins, "runc"), filepath.Join(dir, "runc"),
			cniBinDir(), filepath.Join(dir, "cni", "net.d")),
		filepath.Join(dir, "cni", "net.d", "10-ptp.conflist"): fmt.Sprintf(ptpConflist, podSubnet, filepath.Join(dir, "cni", "ipam")),
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return fmt.Errorf("%w: write %s: %v", ErrStart, p, err)
		}
	}
	return nil
}

func (n *Node) kubeletCertFile() string { return filepath.Join(n.State.Dir, "pki", "kubelet.crt") }
func (n *Node) kubeletKeyFile() string  { return filepath.Join(n.State.Dir, "pki", "kubelet.key") }

// writeKubeletConfig writes kubelet-config.yaml from n.opts.
func (n *Node) writeKubeletConfig() error {
	dir := n.State.Dir
	c := fmt.Sprintf(kubeletConfig,
		n.State.Socket, n.State.NodeIP, n.State.Ports["kubelet"], n.State.Ports["kubelet-healthz"],
		n.kubeletCertFile(), n.kubeletKeyFile(), n.cp.pki.CACertFile, clusterDNS,
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"))
	if n.opts.StaticCPUManager {
		c += fmt.Sprintf("cpuManagerPolicy: static\nreservedSystemCPUs: %q\n", n.opts.ReservedCPUs)
	}
	if len(n.opts.FeatureGates) > 0 {
		c += "featureGates:\n"
		for _, kv := range strings.Split(featureGatesFlag(n.opts.FeatureGates), ",") {
			k, v, _ := strings.Cut(kv, "=")
			c += fmt.Sprintf("  %s: %s\n", k, v)
		}
	}
	p := filepath.Join(dir, "kubelet-config.yaml")
	if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrStart, p, err)
	}
	return nil
}

// clearStaleCPUManagerState removes the kubelet's CPU manager checkpoint
// when it was written for another policy than policy (or cannot be read):
// the kubelet exits on it ("configured policy differs from state
// checkpoint policy"), where a real node would be drained and the file
// deleted by hand. It returns the policy it removed, or "".
func clearStaleCPUManagerState(file, policy string) (string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrStart, err)
	}
	var st struct {
		PolicyName string `json:"policyName"`
	}
	if json.Unmarshal(b, &st) == nil && st.PolicyName == policy {
		return "", nil
	}
	if err := os.Remove(file); err != nil {
		return "", fmt.Errorf("%w: remove stale %s: %v", ErrStart, file, err)
	}
	if st.PolicyName == "" {
		st.PolicyName = "unreadable"
	}
	return st.PolicyName, nil
}

// containerdConfig is containerd 2's CRI setup (configuration version 3)
// with everything private to the node's directory except what containerd
// hard-codes (the shim sockets in /run/containerd/s: a socket_dir must be
// at most 42 characters). The shim and runc are the ones of
// NodeOptions.RuntimeBinDir, named by absolute path; the CRI's network
// namespaces are mounted below the state directory, not in /run/netns.
// NRI is off: nothing here uses it, and it would serve a socket in
// /var/run/nri. restrict_oom_score_adj: without CAP_SYS_RESOURCE (these
// VMs) runc cannot set the kubelet's negative oom_score_adj and every
// sandbox fails.
const containerdConfig = `version = 3
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[metrics]
  address = ""
[plugins.'io.containerd.internal.v1.opt']
  path = %q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = %q
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.cri.v1.runtime']
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %q
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        NoPivotRoot = %t
        BinaryName = %q
        Root = %q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`

const ptpConflist = `{"cniVersion":"1.0.0","name":"cgpilot","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}},
 {"type":"loopback"}]}
`

// kubeletConfig: cgroupfs on a cgroup v1 host (failCgroupV1: false), no
// iptables chains, logs and plugins in the node's directory, and low
// eviction thresholds so a full-ish disk does not evict test pods. It
// serves on the node IP with a certificate of the test bed's CA, takes
// client certificates of that CA and bearer tokens (webhook), and asks the
// API server whether a caller may (webhook authorization), as kubeadm sets
// it up. clusterDNS is the conventional kube-dns Service address with no
// DNS server behind it: pods get a cluster resolv.conf, and no
// MissingClusterDNS event, but names do not resolve in them.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization:
  mode: Webhook
clusterDNS: [%q]
clusterDomain: cluster.local
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
podLogsDir: %q
volumePluginDir: %q
resolvConf: /etc/resolv.conf
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
`

func ctrImport(ctx context.Context, runtimeBins, sock, tar string) error {
	cmd := ctrCommand(ctx, runtimeBins, sock, "images", "import", tar)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", tar, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *Node) waitContainerd(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	rec := n.proc("containerd")
	var last string
	for time.Now().Before(deadline) {
		if !rec.Alive() {
			return fmt.Errorf("%w: containerd exited; last log lines:\n%s", ErrStart, tailFile(rec.Log, 30))
		}
		out, err := exec.CommandContext(ctx, filepath.Join(n.State.RuntimeBins, "ctr"), "--address", n.State.Socket, "version").CombinedOutput()
		if err == nil {
			return nil
		}
		last = strings.TrimSpace(string(out))
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%w: containerd not answering on %s within %v (%s); last log lines:\n%s", ErrStart, n.State.Socket, timeout, last, tailFile(rec.Log, 30))
}

// waitReady waits until the Node is Ready with a heartbeat after since (a
// restarted kubelet's, not the one before it; zero: any).
func (n *Node) waitReady(ctx context.Context, timeout time.Duration, since time.Time) error {
	deadline := time.Now().Add(timeout)
	rec := n.proc("kubelet")
	var last string
	for time.Now().Before(deadline) {
		if !rec.Alive() {
			return fmt.Errorf("%w: kubelet exited; last log lines:\n%s", ErrStart, tailFile(rec.Log, 40))
		}
		node, err := n.cp.Client.CoreV1().Nodes().Get(ctx, n.State.Name, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					// Heartbeat times have one-second resolution: one in
					// the second of since may be the old kubelet's.
					fresh := since.IsZero() || c.LastHeartbeatTime.Time.After(since.Truncate(time.Second))
					if c.Status == corev1.ConditionTrue && fresh {
						return nil
					}
					last = c.Reason + ": " + c.Message
					if !fresh {
						last = "no heartbeat since the kubelet started"
					}
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for node %s: %v", ErrStart, n.State.Name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w: node %s not Ready within %v (%s); kubelet's last log lines:\n%s", ErrStart, n.State.Name, timeout, last, tailFile(rec.Log, 40))
}

// teardownNodeLocked takes the state lock and undoes the node.
func teardownNodeLocked(st *State) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return teardownNode(st)
}

// teardownNode undoes a node in dependency order: pods through the real
// kubelet first (so it removes its own containers, netns and cgroups),
// then the kubelet, containers the kubelet could not stop, containerd,
// stray shims, mounts, kubepods cgroups, veths, sysctls and host paths.
// Every step runs even when an earlier one failed.
func teardownNode(st *State) error {
	ns := st.Node
	if ns == nil {
		return nil
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	kubelet, containerd := findProc(ns.Procs, "kubelet"), findProc(ns.Procs, "containerd")
	if kubelet != nil && kubelet.Alive() && apiAlive(st) {
		add(drainPods(st, 90*time.Second))
	}
	if kubelet != nil {
		add(kubelet.Stop(15 * time.Second))
	}
	// Containers the kubelet did not stop: kill what runs in kubepods
	// (created by this node; StartNode refuses when it pre-exists).
	for _, r := range ns.CgroupRoots {
		killCgroupProcs(filepath.Join(r, "kubepods"))
	}
	if containerd != nil && containerd.Alive() {
		ctrCleanup(ns.RuntimeBins, ns.Socket)
		add(containerd.Stop(15 * time.Second))
	}
	// Shims re-parent to init; they carry our socket path on their
	// command line, which nothing else can.
	if ns.Socket != "" {
		for _, pid := range procsMatching(ns.Socket, "containerd-shim-runc-v2", "containerd-shim", "ctr") {
			st, _ := procStartTime(pid)
			add(ProcRecord{Name: "containerd-shim", PID: pid, StartTime: st}.Stop(5 * time.Second))
		}
	}
	if ns.Dir != "" {
		for _, pid := range procsMatching(ns.Dir, nodePrograms...) {
			st, _ := procStartTime(pid)
			add(ProcRecord{Name: "node process", PID: pid, StartTime: st}.Stop(5 * time.Second))
		}
	}
	prior := map[string]bool{}
	for _, m := range ns.MountsPrior {
		prior[m] = true
	}
	roots := []string{st.Dir}
	for _, m := range ns.Marks {
		roots = append(roots, m.Path)
	}
	add(unmountNew(prior, roots))
	for _, r := range ns.CgroupRoots {
		add(removeCgroupTree(filepath.Join(r, "kubepods"), 10*time.Second))
	}
	add(deleteNewVeths(ns.LinksPrior))
	for _, a := range ns.AddedAddrs {
		add(removeAddr(a))
	}
	add(restoreSysctls(ns.Sysctls))
	mounted := mountedUnder()
	for _, m := range ns.Marks {
		add(m.restore(mounted))
	}
	if ns.Lock != "" {
		if holder, _ := readNodeLock(); holder == st.Dir {
			add(os.Remove(ns.Lock))
		}
	}
	if len(errs) == 0 {
		st.Node = nil
		_ = st.save()
	}
	return errors.Join(errs...)
}

// nodePrograms are what a node runs with its directory in their arguments.
var nodePrograms = []string{"containerd", "containerd-shim-runc-v2", "containerd-shim", "kubelet", "runc", "ctr"}

func findProc(ps []ProcRecord, name string) *ProcRecord {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i]
		}
	}
	return nil
}

// mountedUnder returns a check whether any mount lies at or below a path.
func mountedUnder() func(string) bool {
	ms, _ := readMounts()
	return func(p string) bool {
		for _, m := range ms {
			if under(m.Point, p) {
				return true
			}
		}
		return false
	}
}

func apiAlive(st *State) bool {
	p := findProc(st.Procs, "kube-apiserver")
	return p != nil && p.Alive()
}

// drainPods deletes the controllers owning pods on the node (they would
// re-create them), then every pod bound to the node (1 s grace), and waits
// until the kubelet has confirmed their deletion and removed their cgroups.
func drainPods(st *State, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("%w: kubeconfig %s: %v", ErrTeardown, st.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%w: clientset: %v", ErrTeardown, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("spec.nodeName", st.Node.Name).String()
	grace := int64(1)
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return fmt.Errorf("%w: list pods on %s: %v", ErrTeardown, st.Node.Name, err)
		}
		if len(pods.Items) == 0 && !podCgroupsLeft(st.Node.CgroupRoots) {
			return nil
		}
		if err := deleteControllers(ctx, cs, pods.Items); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: pods on %s not gone within %v (%d left)", ErrTeardown, st.Node.Name, timeout, len(pods.Items))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// podCgroupsLeft reports whether a pod cgroup remains under kubepods in
// the cpu hierarchy (or the first one).
func podCgroupsLeft(roots []string) bool {
	for _, r := range roots {
		if filepath.Base(r) != "cpu" && filepath.Base(r) != "cpu,cpuacct" && len(roots) > 1 {
			continue
		}
		for _, d := range cgroupTree(filepath.Join(r, "kubepods")) {
			if strings.HasPrefix(filepath.Base(d), "pod") {
				return true
			}
		}
	}
	return false
}

// ctrCleanup asks containerd to kill and delete what is left in the CRI
// namespace, so that it unmounts rootfs and its shims exit by themselves.
func ctrCleanup(runtimeBins, sock string) {
	ctr := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, _ := ctrCommand(ctx, runtimeBins, sock, args...).Output()
		return string(out)
	}
	for _, id := range strings.Fields(ctr("tasks", "ls", "-q")) {
		ctr("tasks", "kill", "-s", "SIGKILL", "--all", id)
		ctr("tasks", "delete", "-f", id)
	}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("containers", "delete", id)
	}
}
