package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/cgpilot/cgpilot/aggregator/analysis"
	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/extender"
	"github.com/cgpilot/cgpilot/aggregator/ingest"
	"github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/reschedule"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/aggregator/trust"
	"github.com/cgpilot/cgpilot/aggregator/web"
	"github.com/cgpilot/cgpilot/aggregator/webhook"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("aggregator: invalid configuration")

// ErrLostLease is returned by Run when this replica lost the leader Lease:
// its state may be stale, so the process ends and restarts as a follower.
var ErrLostLease = errors.New("aggregator: lost the leader lease")

// Config configures the aggregator (cmd/cgpilot-aggregator's flags).
type Config struct {
	// Kubeconfig: empty means in-cluster. RESTConfig, when set, is used
	// as is (tests).
	Kubeconfig string
	RESTConfig *rest.Config
	// Namespace holds the Lease (default $POD_NAMESPACE, else
	// cgpilot-system); LeaseName names it (default cgpilot-aggregator).
	Namespace, LeaseName string
	// Identity is this replica's name in the Lease (default $POD_NAME,
	// else the host name plus a random suffix); PodIP ($POD_IP), when set,
	// is published with it so that followers forward requests to the
	// leader.
	Identity, PodIP string
	// SecureAddr serves HTTPS (agent API, webhook, scheduler extender)
	// with CertFile and KeyFile, re-read when they change; HTTPAddr serves
	// HTTP (dashboard, JSON API, /metrics, /healthz, /readyz).
	SecureAddr, HTTPAddr string
	CertFile, KeyFile    string
	// Period is the report grid; Grace, Step as in state.Config.
	Period, Grace, Step time.Duration
	// HotWatermark is the hot-node threshold (share of allocatable).
	HotWatermark float64
	// Placement is the placement rule's watermarks (shares of allocatable
	// that the sum of the 7-day peaks of a node's pods stays under): the
	// extender's filter and the rescheduler apply it. LoadInterval is how
	// often the nodes' loads are recomputed (default 1 min).
	Placement    profile.Rule
	LoadInterval time.Duration
	// Reschedule runs the rescheduler (off by default; it needs the API
	// server): RescheduleConfig's Rule, HotWatermark and Period are the
	// aggregator's; its DeschedulerUser defaults to
	// system:serviceaccount:<Namespace>:cgpilot-descheduler.
	Reschedule       bool
	RescheduleConfig reschedule.Config
	// DeschedulerAudiences are the audiences accepted of the token the
	// descheduler's Prometheus client sends with its query: its pod's
	// service-account token, issued for the API server. Default: those of
	// the aggregator's own service-account token (the same API server's).
	DeschedulerAudiences []string
	// Audience of the agents' tokens and the accepted agent users
	// (default system:serviceaccount:<Namespace>:cgpilot-agent).
	Audience   string
	AgentUsers []string
	// UserAudiences are the audiences accepted of the dashboard's and
	// /metrics' users' tokens (default [Audience]); what they may read is
	// the API server's SubjectAccessReview's answer (package web).
	UserAudiences []string
	// The webhook is served only to callers with a client certificate
	// signed by WebhookClientCAFile naming one of WebhookClientNames (the
	// kube-apiserver's, from its AdmissionConfiguration), the extender to
	// those of ExtenderClientCAFile naming one of ExtenderClientNames (the
	// kube-scheduler's extenders[].tlsConfig). Without a CA file every
	// caller is refused, unless the insecure AnyClient opt-out is set.
	WebhookClientCAFile, ExtenderClientCAFile string
	WebhookClientNames, ExtenderClientNames   []string
	WebhookAnyClient, ExtenderAnyClient       bool
	// CAFile is the CA of the serving certificate (ca.crt of its Secret);
	// with CAConfigMap every replica keeps that ConfigMap in Namespace
	// holding it as ca.crt, which is all the agents mount (never the
	// Secret, whose key the kubelet would fetch onto every node).
	CAFile, CAConfigMap string
	// SampleInterval is the agents' sampling interval: a pod gives at most
	// one sample per interval, which bounds a node's weight in a merge
	// (package trust; default 10 s, the agents' default).
	SampleInterval time.Duration
	// PodRetention is how long a deleted pod still vouches for its node's
	// reports of its workload (default 1 h).
	PodRetention time.Duration
	// StaticTokens (a "token,node" file) replaces TokenReview: only for
	// the load generator and tests. Standalone runs without any API
	// server (no Lease, checkpoints, policies or annotations) and needs
	// StaticTokens.
	StaticTokens string
	Standalone   bool
	// Lease timing (defaults 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// CheckpointBudget (writes/s), CheckpointInterval, CheckpointMinAge,
	// AnnotateInterval: see package kube (0: its defaults).
	CheckpointBudget                     float64
	CheckpointInterval, CheckpointMinAge time.Duration
	AnnotateInterval                     time.Duration
	// FoldInterval is how often windows are merged (default 5 s);
	// EventInterval how often unadmitted pods are turned into Events
	// (default 30 s).
	FoldInterval, EventInterval time.Duration
	// Ready, when set, is called once the servers listen (tests read the
	// bound addresses from it).
	Ready func(a *Aggregator)
	// Clock replaces time.Now for everything the aggregator times by the
	// report grid (tests that simulate hours in seconds); nil: time.Now.
	Clock func() time.Time
	// Pprof serves net/http/pprof under /debug/pprof/ on HTTPAddr.
	Pprof bool
	// IdleTimeout closes connections idle this long (default 5 s: an
	// agent's connection lives for its report and fetch, then goes. An idle
	// TLS connection holds ~45 KiB of buffers; 5,000 agents keeping theirs
	// between reports would hold over 200 MiB for a handshake a minute
	// each, about 0.5 ms of CPU).
	IdleTimeout time.Duration
}

// DefaultConfig returns the defaults of the command's flags.
func DefaultConfig() Config {
	return Config{LeaseName: "cgpilot-aggregator", SecureAddr: ":8443", HTTPAddr: ":8080", Period: report.DefaultPeriod,
		HotWatermark: 0.8, Placement: profile.Rule{CPU: 0.8, Memory: 0.8}, Audience: auth.Audience, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second,
		RetryPeriod: 2 * time.Second, FoldInterval: 5 * time.Second, SampleInterval: 10 * time.Second,
		WebhookClientNames:  []string{"kube-apiserver", "kube-apiserver-kubelet-client"},
		ExtenderClientNames: []string{"system:kube-scheduler", "kube-scheduler"}}
}

// Aggregator is a running replica.
type Aggregator struct {
	cfg      Config
	log      logr.Logger
	reg      *prometheus.Registry
	Store    *state.Store
	Analysis *analysis.Analysis
	Profiles *profile.Profiles

	leader atomic.Bool
	ready  atomic.Bool
	// elector is set once the Lease is contested; the servers, which
	// start first, read it concurrently.
	elector atomic.Pointer[leaderelection.LeaderElector]
	secure  net.Listener
	plain   net.Listener
	cs      kubernetes.Interface
	dc      dynamic.Interface
	// leaseCS and authCS are clients of their own (their own QPS): a
	// flood of token reviews never delays the Lease's renewal, and the
	// rest of the aggregator's calls never delay a review.
	leaseCS, authCS kubernetes.Interface
	pods            *kube.Pods
	nodes           *kube.Nodes
	quotas          *kube.Quotas
	limits          *kube.Limits // LimitRanges, for the webhook's clamp
	policies        *kube.Policies
	certs           *certReloader
	proxy           *leaderProxy
	cp              *kube.Checkpointer
	annot           *kube.NodeAnnotator
	rc              *rest.Config
	// Rescheduler is set with Config.Reschedule.
	Rescheduler *reschedule.Rescheduler
	cluster     *kube.Cluster
}

// SecureAddr and HTTPAddr are the bound listen addresses.
func (a *Aggregator) SecureAddr() string { return a.secure.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (a *Aggregator) HTTPAddr() string { return a.plain.Addr().String() }

func (a *Aggregator) now() time.Time {
	if a.cfg.Clock != nil {
		return a.cfg.Clock()
	}
	return time.Now()
}

// BoundPods is how many pods of w the replica sees bound to node now (0
// without an API server): what it believes node's reports of w against.
func (a *Aggregator) BoundPods(node string, w report.Workload) int {
	if a.pods == nil {
		return 0
	}
	return a.pods.Bound(context.Background(), node, w, a.now())
}

// IsLeader reports whether this replica holds the Lease (and has loaded
// the checkpoints).
func (a *Aggregator) IsLeader() bool { return a.leader.Load() }

// Registry is the replica's metrics registry.
func (a *Aggregator) Registry() *prometheus.Registry { return a.reg }

func (c *Config) defaults() error {
	d := DefaultConfig()
	if c.Namespace == "" {
		c.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if c.Namespace == "" {
		c.Namespace = "cgpilot-system"
	}
	if c.LeaseName == "" {
		c.LeaseName = d.LeaseName
	}
	if c.Identity == "" {
		c.Identity = os.Getenv("POD_NAME")
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Identity = host + "-" + hex.EncodeToString(b[:])
	}
	if c.PodIP == "" {
		c.PodIP = os.Getenv("POD_IP")
	}
	if strings.Contains(c.Identity, "@") {
		return fmt.Errorf("%w: identity %q contains @", ErrConfig, c.Identity)
	}
	for _, x := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.Period, d.Period}, {&c.LeaseDuration, d.LeaseDuration}, {&c.RenewDeadline, d.RenewDeadline}, {&c.RetryPeriod, d.RetryPeriod}, {&c.FoldInterval, d.FoldInterval}} {
		if *x.v == 0 {
			*x.v = x.def
		}
	}
	if c.Period < time.Second || c.Period%time.Second != 0 || (24*time.Hour)%c.Period != 0 || c.Period > report.MaxPeriodSeconds*time.Second {
		return fmt.Errorf("%w: report period %v: whole seconds dividing a day, at most %ds", ErrConfig, c.Period, report.MaxPeriodSeconds)
	}
	if c.HotWatermark == 0 {
		c.HotWatermark = d.HotWatermark
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Second
	}
	if err := profile.ValidateHotWatermark(c.HotWatermark); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Placement == (profile.Rule{}) {
		c.Placement = d.Placement
	}
	if err := c.Placement.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.LoadInterval < 0 {
		return fmt.Errorf("%w: profile interval %v", ErrConfig, c.LoadInterval)
	}
	if c.Audience == "" {
		c.Audience = d.Audience
	}
	if len(c.UserAudiences) == 0 {
		c.UserAudiences = []string{c.Audience}
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = d.SampleInterval
	}
	if c.SampleInterval < time.Second || c.SampleInterval > c.Period {
		return fmt.Errorf("%w: agents' sample interval %v, want 1s to the report period", ErrConfig, c.SampleInterval)
	}
	if len(c.WebhookClientNames) == 0 {
		c.WebhookClientNames = d.WebhookClientNames
	}
	if len(c.ExtenderClientNames) == 0 {
		c.ExtenderClientNames = d.ExtenderClientNames
	}
	if c.CAConfigMap != "" && c.CAFile == "" {
		return fmt.Errorf("%w: publishing the CA in ConfigMap %s needs --tls-ca-file", ErrConfig, c.CAConfigMap)
	}
	if len(c.AgentUsers) == 0 {
		c.AgentUsers = []string{"system:serviceaccount:" + c.Namespace + ":cgpilot-agent"}
	}
	if c.Standalone && c.StaticTokens == "" {
		return fmt.Errorf("%w: standalone needs static tokens (there is no API server to review tokens)", ErrConfig)
	}
	if c.RescheduleConfig.DeschedulerUser == "" {
		c.RescheduleConfig.DeschedulerUser = "system:serviceaccount:" + c.Namespace + ":cgpilot-descheduler"
	}
	if c.Reschedule && c.Standalone {
		return fmt.Errorf("%w: rescheduling needs the API server (it reads pods and PodDisruptionBudgets): not with --standalone", ErrConfig)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: give both the certificate and the key, or neither", ErrConfig)
	}
	if c.CertFile == "" && c.SecureAddr != "" {
		return fmt.Errorf("%w: the HTTPS address %s needs --tls-cert-file and --tls-private-key-file", ErrConfig, c.SecureAddr)
	}
	return nil
}

// Run runs a replica until ctx ends (nil) or it loses the leader Lease
// (ErrLostLease).
func Run(ctx context.Context, cfg Config, log logr.Logger) error {
	a, err := New(cfg, log)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New checks cfg and builds a replica (nothing runs yet).
func New(cfg Config, log logr.Logger) (*Aggregator, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	a := &Aggregator{cfg: cfg, log: log, reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if !cfg.Standalone {
		rc := cfg.RESTConfig
		if rc == nil {
			var err error
			if cfg.Kubeconfig != "" {
				rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
			} else {
				rc, err = rest.InClusterConfig()
			}
			if err != nil {
				return nil, fmt.Errorf("%w: kubeconfig: %v", ErrConfig, err)
			}
			rc.QPS, rc.Burst = 50, 100
		}
		var err error
		if a.cs, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if a.dc, err = dynamic.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		client := func(qps float32, burst int, protobuf bool) (kubernetes.Interface, error) {
			c := rest.CopyConfig(rc)
			c.QPS, c.Burst = qps, burst
			if protobuf {
				c.ContentType = "application/vnd.kubernetes.protobuf"
				c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
			}
			cs, err := kubernetes.NewForConfig(c)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrConfig, err)
			}
			return cs, nil
		}
		if a.leaseCS, err = client(5, 10, false); err != nil {
			return nil, err
		}
		if a.authCS, err = client(50, 100, false); err != nil {
			return nil, err
		}
		podCS, err := client(20, 40, true)
		if err != nil {
			return nil, err
		}
		a.rc = rc
		a.policies = kube.NewPolicies(a.dc, a.cs, 10*time.Minute)
		a.pods = kube.NewPods(podCS)
		a.pods.Retention = cfg.PodRetention
		a.pods.Parent = a.ownerOf
		a.nodes = kube.NewNodes(a.cs, 10*time.Minute)
		a.quotas = kube.NewQuotas(a.cs, 10*time.Minute)
		a.limits = kube.NewLimits(a.cs, 10*time.Minute, a.nodes)
	}
	sc := state.Config{Period: cfg.Period, Grace: cfg.Grace, Step: cfg.Step}
	if a.policies != nil {
		sc.Policies = a.policies.Info
	}
	a.Store = state.New(sc)
	sc = a.Store.Config()
	a.Analysis = analysis.New(analysis.Config{Period: cfg.Period})
	a.Profiles = profile.New(profile.Config{Period: cfg.Period, Grace: sc.Grace, HotWatermark: cfg.HotWatermark, LoadInterval: cfg.LoadInterval})
	if cfg.Reschedule {
		if len(a.cfg.DeschedulerAudiences) == 0 {
			if a.cfg.DeschedulerAudiences = kube.TokenAudiences(a.rc); len(a.cfg.DeschedulerAudiences) == 0 {
				return nil, fmt.Errorf("%w: rescheduling: the audiences of the descheduler's token are unknown (the aggregator runs without a "+
					"service-account token): set --descheduler-token-audiences to the API server's", ErrConfig)
			}
		}
		md, err := metadata.NewForConfig(a.rc)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		a.cluster = kube.NewCluster(a.cs, md)
		rcfg := cfg.RescheduleConfig
		rcfg.Rule, rcfg.HotWatermark, rcfg.Period = cfg.Placement, cfg.HotWatermark, cfg.Period
		if a.Rescheduler, err = reschedule.New(rcfg, a.Profiles, a.cluster, log.WithName("reschedule"), a.reg); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		a.Rescheduler.Now = a.now
	}
	if a.dc != nil {
		a.cp = kube.NewCheckpointer(a.dc, a.Store, a.Profiles, log.WithName("checkpoint"), a.reg)
		a.cp.Now = a.now
		a.cp.Budget, a.cp.Interval, a.cp.MinAge = cfg.CheckpointBudget, cfg.CheckpointInterval, cfg.CheckpointMinAge
		a.annot = kube.NewNodeAnnotator(a.cs, a.Profiles, log.WithName("annotate"), a.reg)
		a.annot.Interval, a.annot.Now = cfg.AnnotateInterval, a.now
	}
	return a, nil
}

// Run starts the servers and the Lease and blocks.
func (a *Aggregator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := a.cfg
	authn, err := a.authenticator()
	if err != nil {
		return err
	}
	var recorder events.EventRecorder
	if a.cs != nil {
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		_ = v1alpha1.AddToScheme(scheme)
		b := events.NewBroadcaster(&events.EventSinkImpl{Interface: a.cs.EventsV1()})
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("aggregator: events: %w", err)
		}
		defer b.Shutdown()
		recorder = b.NewRecorder(scheme, "cgpilot-aggregator")
	}

	observers := []ingest.Observer{a.Analysis, a.Profiles}
	if a.Rescheduler != nil {
		observers = append(observers, a.Rescheduler)
	}
	ing := ingest.New(authn.agents, a.Store, a.reg, observers...)
	ing.Now = a.now
	ing.Trust = a.trust()
	// One report a period, and a backlog of up to 100 at one a second.
	ing.Rate = &ingest.NodeRate{Every: max(cfg.Period/60, 100*time.Millisecond), Burst: 100, Now: a.now}
	wh := webhook.New(a.Store, a.matcher(), recorder, a.reg)
	wh.Parent, wh.Now = a.parents(ctx), a.now
	if a.quotas != nil {
		wh.Quotas = a.quotas.In
	}
	if a.limits != nil {
		wh.Limits = a.limits
	}
	ext := extender.New(a.Profiles, a.reg)
	ext.Now = a.now
	userRequests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_user_requests_total",
		Help: "Dashboard, JSON API and /metrics requests by authentication and authorization result: allowed, unauthenticated, forbidden, throttled, unavailable."}, []string{"result"})
	a.reg.MustRegister(userRequests)
	guard := &auth.Guard{Authn: authn.users, Authz: authn.authz, Result: func(r string) { userRequests.WithLabelValues(r).Inc() }}
	flt := extender.NewFilter(a.Profiles, cfg.Placement, a.reg)
	flt.Now = a.now
	evictions, query, status := reschedule.OffEvictions(cfg.RescheduleConfig.DeschedulerUser), reschedule.OffQuery(), func(*http.Request) reschedule.Status { return reschedule.Status{} }
	if rs := a.Rescheduler; rs != nil {
		evictions, query, status = rs.Evictions(), rs.Query(), rs.StatusFor
	}
	site := &web.Server{Store: a.Store, Analysis: a.Analysis, Profiles: a.Profiles, Leader: a.IsLeader, Identity: cfg.Identity, Now: a.now, Guard: guard}
	site.Views = map[string]func(*http.Request) any{reschedule.PathStatus: func(r *http.Request) any { return status(r) }}
	a.reg.MustRegister(newCollector(a))

	a.proxy = newLeaderProxy(a)
	gates := a.newGates()
	secureMux, plainMux := http.NewServeMux(), http.NewServeMux()
	ing.Register(secureMux)
	wh.Register(secureMux)
	ext.Register(secureMux)
	flt.Register(secureMux)
	site.Register(plainMux)
	// The eviction webhook is under /admission/: the API server's client
	// certificate (gates). The descheduler's query: its token reviewed,
	// and RBAC must let it get the path. The status is a cluster view of
	// the dashboard's (site.Views).
	secureMux.Handle("POST "+reschedule.PathEvictions, evictions)
	dguard := &auth.Guard{Authn: authn.descheduler, Authz: authn.deschedulerAuthz, Result: func(r string) { userRequests.WithLabelValues(r).Inc() }}
	plainMux.Handle(reschedule.PathQuery, dguard.Require(auth.Attributes{Verb: "get", Path: reschedule.PathQuery}, query))
	// /metrics and pprof: callers RBAC lets get those paths (as the
	// kubelet's and the control plane's own metrics).
	plainMux.Handle("GET /metrics", guard.Require(auth.Attributes{Verb: "get", Path: "/metrics"}, promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})))
	if cfg.Pprof {
		pp := auth.Attributes{Verb: "get", Path: "/debug/pprof/"}
		plainMux.Handle("GET /debug/pprof/", guard.Require(pp, http.HandlerFunc(pprof.Index)))
		plainMux.Handle("GET /debug/pprof/profile", guard.Require(pp, http.HandlerFunc(pprof.Profile)))
	}
	plainMux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	plainMux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	if cfg.SecureAddr != "" {
		if a.certs, err = newCertReloader(cfg.CertFile, cfg.KeyFile); err != nil {
			return err
		}
		if a.secure, err = net.Listen("tcp", cfg.SecureAddr); err != nil {
			return fmt.Errorf("aggregator: listen %s: %w", cfg.SecureAddr, err)
		}
		srv := &http.Server{Handler: gates.secure(a.proxy.wrap(secureMux, true)), TLSConfig: a.certs.tlsConfig(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: cfg.IdleTimeout, ErrorLog: a.serverLog()}
		wg.Add(1)
		go func() { defer wg.Done(); serve(ctx, srv, a.secure, true, errc) }()
	}
	if a.plain, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("aggregator: listen %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{Handler: gates.plainHTTP(a.proxy.wrap(plainMux, false)), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 3 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: a.serverLog()}
	wg.Add(1)
	go func() { defer wg.Done(); serve(ctx, srv, a.plain, false, errc) }()
	defer wg.Wait()

	if a.policies != nil {
		if err := a.policies.Start(ctx); err != nil {
			return err
		}
		go a.pods.Run(ctx)
		if err := a.nodes.Start(ctx); err != nil {
			return err
		}
		if err := a.quotas.Start(ctx); err != nil {
			return err
		}
		if err := a.limits.Start(ctx); err != nil {
			return err
		}
		// Reports are judged against the pods: none is taken before the
		// first list of them is in.
		if err := a.pods.WaitForSync(ctx); err != nil {
			return err
		}
		a.log.Info("pod cache synced", "pods", a.pods.Stats().Pods)
		if cfg.CAConfigMap != "" {
			go a.publishCA(ctx)
		}
	}
	a.warnInsecure()
	a.ready.Store(true)
	a.log.Info("serving", "identity", cfg.Identity, "https", addrOf(a.secure), "http", a.plain.Addr().String(), "standalone", cfg.Standalone)
	if cfg.Ready != nil {
		cfg.Ready(a)
	}
	if cfg.Standalone {
		a.leader.Store(true)
		a.lead(ctx, recorder)
		return nil
	}
	return a.elect(ctx, cancel, recorder, errc)
}

// serverLog routes net/http's own messages (TLS handshake errors of
// clients, mostly) to the debug log: a scanner or a misconfigured agent
// must not flood the log.
func (a *Aggregator) serverLog() *stdlog.Logger {
	return stdlog.New(logWriter{a.log.V(1).WithName("http")}, "", 0)
}

type logWriter struct{ l logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func serve(ctx context.Context, srv *http.Server, l net.Listener, tls bool, errc chan<- error) {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	var err error
	if tls {
		err = srv.ServeTLS(l, "", "")
	} else {
		err = srv.Serve(l)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		errc <- err
	}
}

// authenticators are who may call: agents (their node's token), users of
// the dashboard, what users may read, and the descheduler's query.
type authenticators struct {
	agents, users auth.Authenticator
	authz         auth.Authorizer
	// descheduler reviews the token the descheduler's Prometheus client
	// sends (its pod's, for the API server's audiences); with static
	// tokens too when there is an API server, which the descheduler
	// always has. Without one it is users.
	descheduler      auth.Authenticator
	deschedulerAuthz auth.Authorizer
}

func (a *Aggregator) authenticator() (authenticators, error) {
	var out authenticators
	if a.authCS != nil {
		reviews := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_token_reviews_total",
			Help: "Bearer tokens checked, by how: cache (answered from the cache), precheck (refused before any review: not a JWT for the audience, expired), " +
				"throttled (over the caller's or the total review rate), reviewed (a TokenReview), unavailable (the review failed)."}, []string{"result"})
		a.reg.MustRegister(reviews)
		observe := func(r string) { reviews.WithLabelValues(r).Inc() }
		limiter := auth.NewLimiter()
		tr := a.authCS.AuthenticationV1().TokenReviews()
		sar := &kube.AccessReviewer{Reviews: a.authCS.AuthorizationV1().SubjectAccessReviews()}
		out = authenticators{
			agents: &kube.TokenReviewer{Reviews: tr, Audiences: []string{a.cfg.Audience}, Users: a.cfg.AgentUsers, Limiter: limiter, Observe: observe},
			users:  &kube.TokenReviewer{Reviews: tr, Audiences: a.cfg.UserAudiences, AnyNode: true, Limiter: limiter, Observe: observe},
			authz:  sar,
		}
		if a.cfg.Reschedule {
			out.descheduler = &kube.TokenReviewer{Reviews: tr, Audiences: a.cfg.DeschedulerAudiences, AnyNode: true, Limiter: limiter, Observe: observe}
			out.deschedulerAuthz = sar
		}
	}
	if a.cfg.StaticTokens != "" {
		a.log.Info("WARNING: static tokens replace TokenReview and SubjectAccessReview (load tests only)", "file", a.cfg.StaticTokens)
		s, err := auth.LoadStatic(a.cfg.StaticTokens)
		if err != nil {
			return out, err
		}
		out.agents, out.users, out.authz = s, s, s
	}
	if out.descheduler == nil {
		out.descheduler, out.deschedulerAuthz = out.users, out.authz
	}
	return out, nil
}

// warnInsecure says at start which endpoints refuse every caller, or
// admit any, for want of a client CA.
func (a *Aggregator) warnInsecure() {
	cfg := a.cfg
	for _, e := range []struct {
		what, flag, ca string
		any            bool
	}{{"the admission webhook", "--webhook-client-ca-file", cfg.WebhookClientCAFile, cfg.WebhookAnyClient},
		{"the scheduler extender", "--extender-client-ca-file", cfg.ExtenderClientCAFile, cfg.ExtenderAnyClient}} {
		switch {
		case e.any:
			a.log.Info("WARNING: "+e.what+" is served to any caller (insecure opt-out)", "flag", e.flag)
		case e.ca == "":
			a.log.Info(e.what+" refuses every caller until given a client CA", "flag", e.flag)
		}
	}
}

// trust is the report checker: against the API server's pods, policies
// and Nodes when there is one; only the bounds that need none without.
func (a *Aggregator) trust() *trust.Checker {
	tc := trust.Config{Period: a.cfg.Period, SampleInterval: a.cfg.SampleInterval,
		PerPod: func(w report.Workload) (float64, float64, bool) {
			i, ok := a.Profiles.Workload(w, a.now())
			return i.PerPodCPU, i.PerPodMem, ok
		}}
	if a.pods != nil {
		tc.Pods = a.pods
		tc.Policies = a.policyOf
		tc.Sizes = func(node string) (trust.Size, bool) {
			s, ok := a.nodes.Size(node)
			return trust.Size(s), ok
		}
	}
	return trust.New(tc)
}

// policyOf is the policy the aggregator matches to a workload's pods
// (the labels of its latest pod and its namespace's): one, or none with
// the conflicting ones, as agents decide.
func (a *Aggregator) policyOf(w report.Workload) trust.Policy {
	labels := a.pods.Labels(w)
	if labels == nil {
		return trust.Policy{}
	}
	pols, _ := a.policies.Match(w.Namespace, labels)
	switch len(pols) {
	case 0:
		return trust.Policy{}
	case 1:
		return trust.Policy{Name: pols[0].Name, Mode: string(pols[0].Mode)}
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name)
	}
	return trust.Policy{Conflicts: names}
}

// ownerOf reads a ReplicaSet's or Job's controller (for kube.Pods).
func (a *Aggregator) ownerOf(ctx context.Context, ns, kind, name string) (*report.Owner, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var refs []metav1.OwnerReference
	var err error
	switch kind {
	case report.KindReplicaSet:
		var rs *appsv1.ReplicaSet
		if rs, err = a.cs.AppsV1().ReplicaSets(ns).Get(cctx, name, metav1.GetOptions{}); err == nil {
			refs = rs.OwnerReferences
		}
	case report.KindJob:
		var j *batchv1.Job
		if j, err = a.cs.BatchV1().Jobs(ns).Get(cctx, name, metav1.GetOptions{}); err == nil {
			refs = j.OwnerReferences
		}
	default:
		return nil, true
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, true
	case err != nil:
		return nil, false
	}
	if c := metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs}); c != nil {
		return &report.Owner{Kind: c.Kind, Name: c.Name}, true
	}
	return nil, true
}

// noPolicies is the webhook's matcher without an API server.
type noPolicies struct{}

func (noPolicies) Match(string, map[string]string) ([]*policy.Policy, []string) { return nil, nil }

func (a *Aggregator) matcher() webhook.Matcher {
	if a.policies == nil {
		return noPolicies{}
	}
	return a.policies
}

// parents looks up a Job's controller (a CronJob) for the webhook's
// workload rule, by ownerOf; ReplicaSets go by their pod-template-hash.
// (A Job gone names the pod's workload as the Job, whether it reads as
// known without a controller or as unknown.)
func (a *Aggregator) parents(ctx context.Context) func(string) report.ParentFunc {
	if a.cs == nil {
		return nil
	}
	return func(ns string) report.ParentFunc {
		return func(kind, name string) (*report.Owner, bool) {
			if kind != report.KindJob {
				return nil, false
			}
			return a.ownerOf(ctx, ns, kind, name)
		}
	}
}

// elect runs the Lease; while leading, lead runs.
func (a *Aggregator) elect(ctx context.Context, cancel context.CancelFunc, recorder events.EventRecorder, errc <-chan error) error {
	cfg := a.cfg
	identity := cfg.Identity
	if cfg.PodIP != "" {
		identity += "@" + cfg.PodIP
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
		Client:     a.leaseCS.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	lost := make(chan struct{})
	// The elector runs OnStartedLeading in a goroutine and does not wait
	// for it: leading is waited for here, so that its last checkpoint pass
	// ends before Run returns (and the process exits).
	var leadMu sync.Mutex
	var leads []chan struct{}
	var err error
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: cfg.LeaseName, ReleaseOnCancel: true,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				done := make(chan struct{})
				leadMu.Lock()
				leads = append(leads, done)
				leadMu.Unlock()
				defer close(done)
				// Leading ends with the Lease or with the replica (ctx);
				// the Lease itself is released only after that.
				lctx, stop := context.WithCancel(lctx)
				defer stop()
				defer context.AfterFunc(ctx, stop)()
				a.log.Info("leading", "lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", identity)
				a.lead(lctx, recorder)
			},
			OnStoppedLeading: func() {
				wasLeader := a.leader.Swap(false)
				a.log.Info("not leading", "was leader", wasLeader)
				if wasLeader && ctx.Err() == nil {
					close(lost)
					cancel()
				}
			},
			OnNewLeader: func(id string) { a.log.Info("leader is", "identity", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("%w: leader election: %v", ErrConfig, err)
	}
	a.elector.Store(elector)
	// The elector releases the Lease when its context ends. That context
	// ends only after leading has (its last checkpoint pass written), so a
	// replica taking over loads what this one held at the handover.
	ectx, ecancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ecancel()
	go func() {
		<-ctx.Done()
		leadMu.Lock()
		running := leads
		leadMu.Unlock()
		for _, l := range running {
			<-l
		}
		ecancel()
	}()
	done := make(chan struct{})
	go func() {
		elector.Run(ectx)
		leadMu.Lock()
		running := leads
		leadMu.Unlock()
		for _, l := range running {
			<-l
		}
		close(done)
	}()
	select {
	case <-done:
	case err := <-errc:
		cancel()
		<-done
		return fmt.Errorf("aggregator: serving: %w", err)
	}
	select {
	case <-lost:
		return ErrLostLease
	default:
		return nil
	}
}

// leaderIdentity is the current Lease holder ("" when unknown).
func (a *Aggregator) leaderIdentity() string {
	e := a.elector.Load()
	if e == nil {
		return ""
	}
	return e.GetLeader()
}

// lead loads the checkpoints, then serves as the leader until ctx ends.
func (a *Aggregator) lead(ctx context.Context, recorder events.EventRecorder) {
	cfg := a.cfg
	cp := a.cp
	if cp != nil {
		for attempt := 0; ; attempt++ {
			n, err := cp.Load(ctx)
			if err == nil {
				a.log.Info("restored the checkpoints", "workloads", n)
				break
			}
			a.log.Error(err, "loading the checkpoints; retrying", "attempt", attempt)
			if !loop.Sleep(ctx, min(time.Duration(attempt+1)*time.Second, 10*time.Second)) {
				return
			}
		}
	}
	a.leader.Store(true)
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() {
		ingest.FoldLoop(ctx, a.Store, cfg.FoldInterval, a.now, a.Profiles.Close, a.Analysis.Tick)
	})
	if cp != nil {
		run(func() { cp.Run(ctx) })
		// A last pass on the way out keeps what the next leader loads fresh.
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cp.MinAge = time.Nanosecond
			cp.Pass(fctx)
		}()
	}
	if a.Rescheduler != nil {
		run(func() {
			// Start returns once the node informer has listed (it retries
			// by itself), or with ctx.
			if err := a.cluster.Start(ctx); err != nil {
				return
			}
			a.Rescheduler.Run(ctx)
		})
	}
	if a.annot != nil {
		run(func() { a.annot.Run(ctx) })
		run(func() { a.unadmittedEvents(ctx, recorder) })
	}
	<-ctx.Done()
	wg.Wait()
}

// unadmittedEvents reports, on each policy, pods that reports say were
// admitted while the webhook was unreachable (once per workload and hour).
func (a *Aggregator) unadmittedEvents(ctx context.Context, recorder events.EventRecorder) {
	if recorder == nil {
		return
	}
	seen := map[report.Key]time.Time{}
	every := a.cfg.EventInterval
	if every == 0 {
		every = 30 * time.Second
	}
	loop.Every(ctx, every, func() {
		now := a.now()
		for _, u := range a.Analysis.Anomalies(now, 0).Unadmitted {
			if last, ok := seen[u.Key]; ok && now.Sub(last) < time.Hour {
				continue
			}
			seen[u.Key] = now
			if u.Policy == "" {
				continue
			}
			pol := &v1alpha1.RightsizePolicy{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RightsizePolicy"},
				ObjectMeta: metav1.ObjectMeta{Name: u.Policy}}
			recorder.Eventf(pol, nil, "Warning", "AdmittedWithoutWebhook", "Admit",
				"%d pods of %s were created while the webhook was unreachable and kept their declared requests", u.Pods, u.Key.Workload)
		}
	})
}

// LeaseHolder returns the holder identity of the Lease (tests).
func LeaseHolder(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return holder(l), nil
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
