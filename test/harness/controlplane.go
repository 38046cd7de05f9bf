//go:build linux

package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"  // first address of serviceCIDR: the kubernetes Service
	clusterDNS  = "10.0.0.10" // kubeadm's kube-dns address; nothing serves it
)

// Options configure a control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver, and for Controllers
	// kube-controller-manager and kube-scheduler (tier.E2E returns it).
	BinDir string
	// Dir is the state directory; empty means a new temporary one. It is
	// removed by teardown either way.
	Dir string
	// Controllers also starts kube-controller-manager and kube-scheduler
	// (workload controllers, ServiceAccount admission and tokens). Without
	// them the ServiceAccount admission plugin is off, as in envtest.
	Controllers bool
	// ReadyTimeout bounds each wait for readiness (default 90 s: the
	// machine is shared and often busy).
	ReadyTimeout time.Duration
	// SchedulerConfig, with Controllers, is YAML appended to the
	// kube-scheduler's KubeSchedulerConfiguration (apiVersion
	// kubescheduler.config.k8s.io/v1), e.g. an extenders: list; the harness
	// fills in clientConnection. Empty runs the scheduler with flags only.
	SchedulerConfig string
	// Detach lets the processes outlive this one (the testbed command).
	Detach bool
	// ExtraFlags are appended to a component's command line, keyed by its
	// name ("etcd", "kube-apiserver", "kube-controller-manager",
	// "kube-scheduler"); for a flag the harness sets too, the later one,
	// hence this one, wins.
	ExtraFlags map[string][]string
	// FeatureGates are given to kube-apiserver, kube-controller-manager and
	// kube-scheduler as --feature-gates (a kubelet takes its own in
	// NodeOptions).
	FeatureGates map[string]bool
	// DisableWatchCache starts kube-apiserver with --watch-cache=false, so
	// every watch is served by etcd: after CompactEtcd, a watch resuming
	// from before the compaction gets 410 Gone and its informer relists.
	// (With the cache, the API server keeps a window of events of its own
	// and a compaction changes nothing its watchers see.)
	DisableWatchCache bool
	// Logf receives progress lines (t.Logf); nil discards them.
	Logf func(format string, args ...any)
}

// ControlPlane is a running etcd + kube-apiserver (+ controllers).
type ControlPlane struct {
	State  *State
	Config *rest.Config
	Client kubernetes.Interface
	// Started is how long the start took, until /readyz (and the
	// controllers' /healthz) answered ok.
	Started time.Duration
	opts    Options
	pki     *pki
	// stopped is closed by Stop: fake-node heartbeats end with it.
	stopped  chan struct{}
	stopOnce sync.Once
}

// StartControlPlane starts etcd and kube-apiserver (and the controllers
// when asked) and waits until they are ready.
func StartControlPlane(ctx context.Context, o Options) (cp *ControlPlane, err error) {
	t0 := time.Now()
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	need := []string{"etcd", "kube-apiserver"}
	if o.Controllers {
		need = append(need, "kube-controller-manager", "kube-scheduler")
	}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%w: %s not in %q: run test/k8sbins/build.sh (make deps)", ErrStart, b, o.BinDir)
		}
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "cgpilot-cp-"); err != nil {
			return nil, fmt.Errorf("%w: temp dir: %v", ErrStart, err)
		}
	} else {
		if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
			return nil, fmt.Errorf("%w: %s already holds a test bed (%s): tear it down first", ErrStart, dir, StateFile)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: dir %s: %v", ErrStart, dir, err)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	st := &State{Dir: dir, Ports: map[string]int{}}
	register(st)
	defer func() {
		if err != nil {
			if terr := teardown(st); terr != nil {
				err = errors.Join(err, terr)
			}
			unregister(st)
		}
	}()
	for _, d := range []string{"logs", "etcd", "pki"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	if err := st.save(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	p, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	st.Ports["etcd-client"], st.Ports["etcd-peer"], st.Ports["kube-apiserver"] = ports[0], ports[1], ports[2]
	if o.Controllers {
		st.Ports["kube-controller-manager"], st.Ports["kube-scheduler"] = ports[3], ports[4]
	}
	st.Server = "https://127.0.0.1:" + strconv.Itoa(st.Ports["kube-apiserver"])
	st.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(st.Kubeconfig, st.Server, p); err != nil {
		return nil, err
	}

	cp = &ControlPlane{State: st, opts: o, pki: p, stopped: make(chan struct{})}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(st.Ports["etcd-client"])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(st.Ports["etcd-peer"])
	if err := cp.start("etcd",
		"--name=cgpilot", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=cgpilot="+peerURL,
		// Test data is thrown away: fsync only slows every write down.
		"--unsafe-no-fsync=true",
	); err != nil {
		return nil, err
	}
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(st.Ports["kube-apiserver"]),
		"--cert-dir=" + filepath.Join(dir, "pki", "serving"),
		"--tls-cert-file=" + p.ServingCertFile, "--tls-private-key-file=" + p.ServingKeyFile,
		"--client-ca-file=" + p.CACertFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPubFile, "--service-account-signing-key-file=" + p.SAKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// Logs, exec and port-forward: the apiserver dials a kubelet at its
		// InternalIP (a harness node's NodeIP; a harness node name does not
		// resolve), checks its serving certificate against the test bed's
		// CA and authenticates with a client certificate of its own.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-certificate-authority=" + p.CACertFile,
		"--kubelet-client-certificate=" + p.KubeletClientCertFile, "--kubelet-client-key=" + p.KubeletClientKeyFile,
		// On SIGTERM, end open watches within 2 s (their clients re-watch
		// elsewhere, or from the same resourceVersion once it is back):
		// without it the HTTP server waits up to 60 s for every watch.
		"--shutdown-watch-termination-grace-period=2s",
	}
	if o.DisableWatchCache {
		apiArgs = append(apiArgs, "--watch-cache=false")
	}
	if !o.Controllers {
		// No token controller, so no default ServiceAccount: pods would be
		// rejected by this plugin (envtest does the same).
		apiArgs = append(apiArgs, "--disable-admission-plugins=ServiceAccount")
	}
	if err := cp.start("kube-apiserver", apiArgs...); err != nil {
		return nil, err
	}
	if cp.Config, err = restConfig(st.Server, p); err != nil {
		return nil, err
	}
	if err := cp.waitHTTP(ctx, "kube-apiserver", st.Server+"/readyz", cp.Config); err != nil {
		return nil, err
	}
	o.Logf("harness: kube-apiserver ready at %s after %v", st.Server, time.Since(t0).Round(time.Millisecond))
	if o.Controllers {
		common := func(name string) []string {
			return []string{
				"--kubeconfig=" + st.Kubeconfig,
				"--authentication-kubeconfig=" + st.Kubeconfig, "--authorization-kubeconfig=" + st.Kubeconfig,
				"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(st.Ports[name]),
				"--cert-dir=" + filepath.Join(dir, "pki", name),
				"--leader-elect=false",
			}
		}
		if err := cp.start("kube-controller-manager", append(common("kube-controller-manager"),
			"--service-account-private-key-file="+p.SAKeyFile,
			"--root-ca-file="+p.CACertFile,
			"--cluster-signing-cert-file="+p.CACertFile, "--cluster-signing-key-file="+p.CAKeyFile,
			// Its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec,
			// is created on the host.
			"--flex-volume-plugin-dir="+filepath.Join(dir, "flexvolume"),
		)...); err != nil {
			return nil, err
		}
		schedArgs := common("kube-scheduler")
		if o.SchedulerConfig != "" {
			// With --config the scheduler ignores --kubeconfig: the file
			// names it.
			path := filepath.Join(dir, "kube-scheduler.yaml")
			cfg := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: " +
				strconv.Quote(st.Kubeconfig) + "\n" + o.SchedulerConfig + "\n"
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				return nil, fmt.Errorf("%w: scheduler config: %v", ErrStart, err)
			}
			schedArgs = append(schedArgs, "--config="+path)
		}
		if err := cp.start("kube-scheduler", schedArgs...); err != nil {
			return nil, err
		}
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			url := "https://127.0.0.1:" + strconv.Itoa(st.Ports[name]) + "/healthz"
			if err := cp.waitHTTP(ctx, name, url, nil); err != nil {
				return nil, err
			}
		}
		o.Logf("harness: controllers healthy after %v", time.Since(t0).Round(time.Millisecond))
	}
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("%w: clientset: %v", ErrStart, err)
	}
	cp.Started = time.Since(t0)
	return cp, nil
}

// Dir is the control plane's state directory.
func (cp *ControlPlane) Dir() string { return cp.State.Dir }

// Kubeconfig is the path of an admin kubeconfig (client certificate in
// system:masters).
func (cp *ControlPlane) Kubeconfig() string { return cp.State.Kubeconfig }

// LogPath is where a component of the control plane (etcd,
// kube-apiserver, kube-scheduler...) writes its log.
func (cp *ControlPlane) LogPath(component string) string {
	return filepath.Join(cp.State.Dir, "logs", component+".log")
}

// BinDir is where the Kubernetes binaries come from.
func (cp *ControlPlane) BinDir() string { return cp.opts.BinDir }

// Stop tears the test bed down (a node first, if one runs) and removes its
// directory. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() { close(cp.stopped) })
	err := teardown(cp.State)
	unregister(cp.State)
	return err
}

// Detach forgets the test bed in this process: it is no longer torn down on
// a signal (the testbed command's `up` leaves it running).
func (cp *ControlPlane) Detach() { unregister(cp.State) }

// start starts a component with args, then the feature gates (not for
// etcd) and the component's ExtraFlags.
func (cp *ControlPlane) start(name string, args ...string) error {
	if gates := featureGatesFlag(cp.opts.FeatureGates); gates != "" && name != "etcd" {
		args = append(args, "--feature-gates="+gates)
	}
	args = append(args, cp.opts.ExtraFlags[name]...)
	rec, err := startProc(name, cp.LogPath(name), cp.opts.Detach, nil, filepath.Join(cp.opts.BinDir, name), args...)
	if err != nil {
		return err
	}
	cp.State.Procs = append(cp.State.Procs, rec)
	return cp.State.save()
}

// featureGatesFlag renders gates as Kubernetes' --feature-gates value,
// sorted ("A=true,B=false"); "" for none.
func featureGatesFlag(gates map[string]bool) string {
	out := make([]string, 0, len(gates))
	for k, v := range gates {
		out = append(out, k+"="+strconv.FormatBool(v))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// StopAPIServer stops kube-apiserver (SIGTERM; SIGKILL after 20 s) and
// leaves etcd, the controllers and a node running, as when the API server
// is away for an upgrade or a crash: clients get connection refused until
// StartAPIServer. Stopping a stopped API server does nothing.
func (cp *ControlPlane) StopAPIServer() error {
	cp.State.mu.Lock()
	rec := cp.proc("kube-apiserver")
	cp.State.mu.Unlock()
	if rec == nil {
		return fmt.Errorf("%w: no kube-apiserver recorded in %s", ErrStart, cp.State.Dir)
	}
	if err := rec.Stop(20 * time.Second); err != nil {
		return fmt.Errorf("harness: stop kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// same command line (so the same port, certificates, flags and etcd data),
// records its new PID in state.json and waits for /readyz. Its log goes on
// in the same file.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	st := cp.State
	st.mu.Lock()
	rec := cp.proc("kube-apiserver")
	switch {
	case st.tornDown:
		st.mu.Unlock()
		return fmt.Errorf("%w: test bed %s is torn down", ErrStart, st.Dir)
	case rec == nil:
		st.mu.Unlock()
		return fmt.Errorf("%w: no kube-apiserver recorded in %s", ErrStart, st.Dir)
	case rec.Alive():
		st.mu.Unlock()
		return fmt.Errorf("%w: kube-apiserver still runs (pid %d): StopAPIServer first", ErrStart, rec.PID)
	}
	appendLine(rec.Log, "--- harness: restarting kube-apiserver at "+time.Now().Format(time.RFC3339Nano))
	started, err := startProc(rec.Name, rec.Log, cp.opts.Detach, nil, rec.Args[0], rec.Args[1:]...)
	if err == nil {
		*rec = started
		err = st.save()
	}
	st.mu.Unlock()
	if err != nil {
		return err
	}
	return cp.waitHTTP(ctx, "kube-apiserver", st.Server+"/readyz", cp.Config)
}

// appendLine adds a marker line to a log; failing to is not an error.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

func (cp *ControlPlane) proc(name string) *ProcRecord {
	for i := range cp.State.Procs {
		if cp.State.Procs[i].Name == name {
			return &cp.State.Procs[i]
		}
	}
	return nil
}

// waitHTTP polls url until it answers 200 "ok", the process dies, or the
// timeout passes; errors carry the tail of the process's log. A nil cfg
// means a serving certificate of the process's own (not verified).
func (cp *ControlPlane) waitHTTP(ctx context.Context, name, url string, cfg *rest.Config) error {
	client := &http.Client{Timeout: 5 * time.Second}
	if cfg != nil {
		tr, err := rest.TransportFor(cfg)
		if err != nil {
			return fmt.Errorf("%w: %s transport: %v", ErrStart, name, err)
		}
		client.Transport = tr
	} else {
		// The controllers' self-signed serving certs are made at start;
		// /healthz is open to anyone, so only liveness is checked here.
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback health probe
	}
	ctx, cancel := context.WithTimeout(ctx, cp.opts.ReadyTimeout)
	defer cancel()
	rec := cp.proc(name)
	var last string
	for {
		if rec != nil && !rec.Alive() {
			return fmt.Errorf("%w: %s exited before ready; last log lines:\n%s%s", ErrStart, name, tailFile(rec.Log, 30), cp.etcdHint(name))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok" {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			log := "(no log)"
			if rec != nil {
				log = tailFile(rec.Log, 30)
			}
			return fmt.Errorf("%w: %s not ready at %s within %v (last answer: %s); last log lines:\n%s%s",
				ErrStart, name, url, cp.opts.ReadyTimeout, last, log, cp.etcdHint(name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// etcdHint adds etcd's log when the apiserver fails and etcd is dead.
func (cp *ControlPlane) etcdHint(name string) string {
	if name != "kube-apiserver" {
		return ""
	}
	if e := cp.proc("etcd"); e != nil && !e.Alive() {
		return "\netcd exited too; its last log lines:\n" + tailFile(e.Log, 15)
	}
	return ""
}

func restConfig(server string, p *pki) (*rest.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.CACert) {
		return nil, fmt.Errorf("%w: bad CA PEM", ErrStart)
	}
	return &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CACert, CertData: p.AdminCert, KeyData: p.AdminKey},
		QPS:             100, Burst: 200,
		Timeout: 30 * time.Second,
	}, nil
}

func writeKubeconfig(path, server string, p *pki) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["cgpilot"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.CACert}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.AdminCert, ClientKeyData: p.AdminKey}
	c.Contexts["cgpilot"] = &clientcmdapi.Context{Cluster: "cgpilot", AuthInfo: "admin"}
	c.CurrentContext = "cgpilot"
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		return fmt.Errorf("%w: kubeconfig %s: %v", ErrStart, path, err)
	}
	return nil
}

// freePorts reserves n distinct loopback ports for processes started later.
// They are released before use, so they are drawn from below the kernel's
// ephemeral range: there, any outgoing connection on the machine could take
// one as its source port in between (seen: kubelet "address already in use").
// Where the range leaves no room below it, the kernel picks.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	low := ephemeralLow()
	ports := make([]int, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		addr := "127.0.0.1:0"
		if low-portFloor >= 1000 && attempt < 200 {
			addr = fmt.Sprintf("127.0.0.1:%d", portFloor+rand.IntN(low-portFloor))
		} else if attempt >= 200+n {
			return nil, fmt.Errorf("%w: no free loopback port after %d attempts", ErrStart, attempt)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portFloor keeps clear of well-known and commonly configured service ports.
const portFloor = 20000

// ephemeralLow is the first port of net.ipv4.ip_local_port_range (Linux's
// default 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil || v <= 0 || v > 65535 {
		return 32768
	}
	return v
}
