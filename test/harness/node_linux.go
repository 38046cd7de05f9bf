//go:build linux

package harness

import (
	"context"
	"errors"
	"fmt"
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
}

// NodeState is the record of a node: what it started and what the host
// looked like before, for teardown.
type NodeState struct {
	Name        string            `json:"name"`
	Dir         string            `json:"dir"`
	Socket      string            `json:"socket"`
	Procs       []ProcRecord      `json:"procs"` // containerd, kubelet
	Ports       map[string]int    `json:"ports"`
	Marks       []PathMark        `json:"marks"`
	MountsPrior []string          `json:"mountsPrior"`
	LinksPrior  []string          `json:"linksPrior"`
	Sysctls     map[string]string `json:"sysctls"`
	CgroupRoots []string          `json:"cgroupRoots"` // hierarchy mount points
	Lock        string            `json:"lock"`
}

// Node is a running containerd + kubelet registered with a ControlPlane.
type Node struct {
	cp      *ControlPlane
	State   *NodeState
	Started time.Duration // until Node Ready
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

// ImportImage imports a docker-archive into the node's containerd (k8s.io
// namespace), for images beyond pause and busybox (the agent image).
func (n *Node) ImportImage(ctx context.Context, tarPath string) error {
	return ctrImport(ctx, n.State.Socket, tarPath)
}

// missingDeps names what the node needs from the host and how to get it.
func missingDeps(binDir string) error {
	var miss []string
	if _, err := os.Stat(filepath.Join(binDir, "kubelet")); err != nil {
		miss = append(miss, "kubelet in "+binDir+" (test/k8sbins/build.sh)")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
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
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: a node needs root", ErrStart)
	}
	if err := missingDeps(cp.BinDir()); err != nil {
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
		Name: o.Name, Dir: dir, Socket: filepath.Join(dir, "containerd", "containerd.sock"),
		Ports: map[string]int{}, LinksPrior: netLinks(), Sysctls: readSysctls(), CgroupRoots: roots, Lock: NodeLockFile,
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
	n = &Node{cp: cp, State: ns}
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "images", "runc", "opt", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	pauseTar, busyboxTar := filepath.Join(dir, "images", "pause.tar"), filepath.Join(dir, "images", "busybox.tar")
	if err := images.Pause(ctx, pauseTar); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	if err := images.Busybox(ctx, o.Busybox, busyboxTar); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	if err := n.writeConfigs(cp); err != nil {
		return nil, err
	}
	if err := n.start("containerd", "containerd", "--config", filepath.Join(dir, "containerd", "config.toml")); err != nil {
		return nil, err
	}
	if err := n.waitContainerd(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	for _, tar := range []string{pauseTar, busyboxTar} {
		if err := ctrImport(ctx, ns.Socket, tar); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	if err := n.start("kubelet", filepath.Join(cp.BinDir(), "kubelet"),
		"--config="+filepath.Join(dir, "kubelet-config.yaml"),
		"--kubeconfig="+st.Kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"),
		"--cert-dir="+filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override="+o.Name,
	); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, o.ReadyTimeout); err != nil {
		return nil, err
	}
	n.Started = time.Since(t0)
	cp.opts.Logf("harness: node %s Ready after %v", o.Name, n.Started.Round(time.Millisecond))
	return n, nil
}

func (n *Node) start(name, bin string, args ...string) error {
	rec, err := startProc(name, filepath.Join(n.State.Dir, "logs", name+".log"), n.cp.opts.Detach, nil, bin, args...)
	if err != nil {
		return err
	}
	st := n.cp.State
	st.mu.Lock()
	defer st.mu.Unlock()
	n.State.Procs = append(n.State.Procs, rec)
	return st.save()
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
	n.State.Ports["kubelet"], n.State.Ports["kubelet-healthz"] = ports[0], ports[1]
	files := map[string]string{
		filepath.Join(dir, "containerd", "config.toml"): fmt.Sprintf(containerdConfig,
			filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"),
			n.State.Socket, n.State.Socket+".ttrpc", filepath.Join(dir, "opt"),
			images.PauseRef, filepath.Join(dir, "runc"), cniBinDir(), filepath.Join(dir, "cni", "net.d")),
		filepath.Join(dir, "cni", "net.d", "10-ptp.conflist"): fmt.Sprintf(ptpConflist, podSubnet, filepath.Join(dir, "cni", "ipam")),
		filepath.Join(dir, "kubelet-config.yaml"): fmt.Sprintf(kubeletConfig,
			n.State.Socket, ports[0], ports[1], cp.pki.CACertFile,
			filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")),
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return fmt.Errorf("%w: write %s: %v", ErrStart, p, err)
		}
	}
	return nil
}

// containerdConfig is containerd 1.6's CRI setup with everything private
// except what it hard-codes (/run/containerd/s shim sockets, /run/netns).
// restrict_oom_score_adj: without CAP_SYS_RESOURCE (these VMs) runc cannot
// set the kubelet's negative oom_score_adj and every sandbox fails.
const containerdConfig = `version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`

const ptpConflist = `{"cniVersion":"1.0.0","name":"cgpilot","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}},
 {"type":"loopback"}]}
`

// kubeletConfig: cgroupfs on a cgroup v1 host (failCgroupV1: false), no
// iptables chains, logs and plugins in the node's directory, and low
// eviction thresholds so a full-ish disk does not evict test pods.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization:
  mode: AlwaysAllow
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

func ctrImport(ctx context.Context, sock, tar string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", sock, "-n", "k8s.io", "images", "import", tar)
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
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.State.Socket, "version").CombinedOutput()
		if err == nil {
			return nil
		}
		last = strings.TrimSpace(string(out))
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%w: containerd not answering on %s within %v (%s); last log lines:\n%s", ErrStart, n.State.Socket, timeout, last, tailFile(rec.Log, 30))
}

func (n *Node) waitReady(ctx context.Context, timeout time.Duration) error {
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
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
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
		ctrCleanup(ns.Socket)
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
func ctrCleanup(sock string) {
	ctr := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...).Output()
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
