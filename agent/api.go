package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
)

// api.go serves the local API (package local has the paths and views) on
// a unix socket that only root (and an optional group) may use: see
// socket.go.

func (c *controller) podView(p pools.Pod) local.PodView {
	v := local.PodView{Namespace: p.Namespace, Name: p.Name, UID: p.UID, QoS: string(p.QoS), Pool: p.Req.Pool}
	st := c.pools.State()
	switch {
	case p.Untouched:
		v.State = "Untouched"
		if p.KubeletStatic {
			v.Reason = "KubeletStatic"
		} else if p.Req.Pool != local.PoolNone {
			v.Reason = "NotManaged"
		}
	case p.ReqErr != nil:
		v.State, v.Reason = string(local.StateRefused), pools.Reason(p.ReqErr)
	default:
		a, ok := st.Assignment(p.UID)
		switch {
		case ok && a.ReleaseIsolation:
			v.State = string(local.StateReleased)
		case ok:
			v.State = string(local.StateAllocated)
		case p.Req.Pool == local.PoolExclusive:
			v.State = string(local.StateRefused)
		default:
			v.State = string(local.StateShared)
		}
	}
	if !p.Untouched {
		t, _ := c.pools.Target(p)
		v.CPUs = t.String()
	}
	return v
}

func (c *controller) explain(key string) (local.ExplainView, error) {
	ns, name, _ := strings.Cut(key, "/")
	pod, err := c.lister.Pods(ns).Get(name)
	if err != nil {
		return local.ExplainView{}, err
	}
	p := c.podInfo(pod)
	v := local.ExplainView{PodView: c.podView(p), Annotations: map[string]string{}, DemandCPUs: p.DemandCPUs, Untouched: p.Untouched, KubeletStatic: p.KubeletStatic}
	for k, val := range pod.Annotations {
		if strings.HasPrefix(k, local.AnnotationPrefix) {
			v.Annotations[k] = val
		}
	}
	if p.ReqErr != nil {
		v.ParseError = p.ReqErr.Error()
	}
	switch {
	case !c.cfg.manages(p.Namespace):
		v.Decision = "namespace " + p.Namespace + " is not managed (config ignoredNamespaces/managedNamespaces): never touched"
	case p.KubeletStatic:
		v.Decision = "the kubelet's static CPU manager holds CPUs for this pod: never touched"
	case p.Untouched:
		v.Decision = "cpu-pool none or a terminal phase: never touched"
	case p.ReqErr != nil:
		v.Decision = "annotations refused: " + p.ReqErr.Error()
	case v.State == string(local.StateAllocated):
		v.Decision = "exclusive cpus " + v.CPUs + ", CFS quota removed on pod and containers"
	case v.State == string(local.StateReleased):
		v.Decision = "exclusive, isolation released: runs on the shared pool and its own cpus " + v.CPUs
	case p.Req.Pool == local.PoolExclusive:
		v.Decision = "exclusive request not granted (see status annotation and events); runs on the shared pool"
	default:
		v.Decision = "shared pool " + v.CPUs
	}
	if pp, err := c.cgroups.PodPath(p.UID, p.QoS); err == nil {
		children, _ := c.cgroups.Children(pp)
		for _, path := range append([]string{pp}, children...) {
			cv := local.CgroupView{Path: path}
			if set, err := c.cgroups.ReadCPUs(path); err != nil {
				cv.Error = err.Error()
			} else {
				cv.CPUs = set.String()
			}
			v.Cgroups = append(v.Cgroups, cv)
		}
	}
	for _, st := range pod.Status.ContainerStatuses {
		cv := local.ContainerView{Name: st.Name, ID: st.ContainerID, State: local.ContainerUnknown}
		switch {
		case st.State.Running != nil:
			cv.State = local.ContainerRunning
		case st.State.Waiting != nil:
			cv.State = local.ContainerWaiting
		case st.State.Terminated != nil:
			cv.State = local.ContainerTerminated
		}
		v.Containers = append(v.Containers, cv)
	}
	v.Events = c.events.Recent(ns, name)
	if c.rs != nil {
		c.rs.Explain(string(pod.UID), &v)
	}
	return v, nil
}

func (c *controller) apiHandler() http.Handler {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	reply := func(w http.ResponseWriter, v any, err error) {
		if err != nil {
			write(w, http.StatusNotFound, local.ErrorView{Error: err.Error()})
			return
		}
		write(w, http.StatusOK, v)
	}
	// The pool views wait for the state the agent restores at start (the
	// checkpoint, the pods) and its first sweep: before, an empty pool
	// would be shown as the node's (a restarted agent's socket answers
	// within a second, its state a moment later).
	restored := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !c.health.firstSweepDone() {
				write(w, http.StatusServiceUnavailable, local.ErrorView{Error: "starting: the pool state is not restored yet; try again in a moment"})
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET "+local.PathPods, restored(func(w http.ResponseWriter, r *http.Request) {
		out := []local.PodView{}
		for _, p := range c.allPods() {
			out = append(out, c.podView(p))
		}
		reply(w, out, nil)
	}))
	mux.HandleFunc("GET "+local.PathPools, restored(func(w http.ResponseWriter, r *http.Request) {
		v := local.PoolsView{NodeSummary: c.summary(), Assignments: []local.AssignmentView{}}
		for _, a := range c.pools.State().Assignments() {
			v.Assignments = append(v.Assignments, local.AssignmentView{Namespace: a.Namespace, Name: a.Name, UID: a.UID, CPUs: a.CPUs.String(), ReleaseIsolation: a.ReleaseIsolation})
		}
		reply(w, v, nil)
	}))
	mux.HandleFunc("GET "+local.PathTopology, func(w http.ResponseWriter, r *http.Request) {
		st := c.pools.State()
		reply(w, local.TopologyView{CPUs: st.All().String(), Reserved: st.Reserved().String(), Source: c.topologySource, Machine: c.topo}, nil)
	})
	mux.HandleFunc("GET "+local.PathExplain, restored(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("pod")
		if !strings.Contains(key, "/") {
			reply(w, nil, fmt.Errorf("want ?pod=NAMESPACE/NAME, got %q", key))
			return
		}
		v, err := c.explain(key)
		reply(w, v, err)
	}))
	mux.HandleFunc("GET "+local.PathAggregator, func(w http.ResponseWriter, r *http.Request) {
		if c.rs == nil || c.rs.Reporter() == nil {
			reply(w, nil, errors.New("this agent does not report to an aggregator (aggregator.url is empty, or right-sizing is off)"))
			return
		}
		reply(w, c.rs.Reporter().View(time.Now()), nil)
	})
	mux.HandleFunc("GET "+local.PathRecs, func(w http.ResponseWriter, r *http.Request) {
		out := []local.RecView{}
		if c.rs != nil {
			out = c.rs.Views()
		}
		reply(w, out, nil)
	})
	mux.HandleFunc("GET "+local.PathHistory, func(w http.ResponseWriter, r *http.Request) {
		if c.rs == nil {
			reply(w, nil, fmt.Errorf("right-sizing is off on this node: no history"))
			return
		}
		since, err := parseSince(r.URL.Query().Get("since"), time.Now())
		if err != nil {
			reply(w, nil, err)
			return
		}
		c.rs.History().Flush()
		w.Header().Set("Content-Type", "text/csv")
		if _, err := c.rs.History().Export(w, since); err != nil {
			c.log.Error(err, "history export")
		}
	})
	mux.HandleFunc("GET "+local.PathEvents, func(w http.ResponseWriter, r *http.Request) {
		ns, name, _ := strings.Cut(r.URL.Query().Get("pod"), "/")
		reply(w, c.events.Recent(ns, name), nil)
	})
	return mux
}

// parseSince reads "7d", "36h", "90m" (days are 24 h) or an RFC 3339 time;
// empty is the last 7 days.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now.Add(-7 * 24 * time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 3650 {
			return time.Time{}, fmt.Errorf("since=%q: want a count of days like 7d, a duration like 36h, or an RFC 3339 time", v)
		}
		return now.Add(-time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("since=%q: want a count of days like 7d, a duration like 36h, or an RFC 3339 time", v)
	}
	return now.Add(-d), nil
}
