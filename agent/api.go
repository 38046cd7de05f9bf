package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Local API: JSON over a unix socket (mode 0600, root only), read by
// cgpilotctl. Paths:
//
//	GET /v1/pods                  []PodView
//	GET /v1/pools                 PoolsView
//	GET /v1/topology              TopologyView
//	GET /v1/explain?pod=NS/NAME   ExplainView
//	GET /v1/events[?pod=NS/NAME]  []EventRecord

// PodView is one pod in `cgpilotctl pods`.
type PodView struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	UID       string   `json:"uid"`
	QoS       QoSClass `json:"qos"`
	Pool      Pool     `json:"pool"`
	State     string   `json:"state"`
	CPUs      string   `json:"cpus"` // the target cpuset ("" when untouched)
	Reason    string   `json:"reason,omitempty"`
}

// PoolsView is `cgpilotctl pools`.
type PoolsView struct {
	NodeSummary
	Assignments []AssignmentView `json:"assignments"`
}

// AssignmentView is one exclusive allocation.
type AssignmentView struct {
	Namespace        string `json:"namespace"`
	Name             string `json:"name"`
	UID              string `json:"uid"`
	CPUs             string `json:"cpus"`
	ReleaseIsolation bool   `json:"releaseIsolation,omitempty"`
}

// TopologyView is what the agent allocates from.
type TopologyView struct {
	CPUs     string `json:"cpus"`
	Reserved string `json:"reserved"`
	Source   string `json:"source"`
	Machine  string `json:"machine,omitempty"`
}

// ExplainView is `cgpilotctl explain POD`: every input of the decision and
// the cgroups as they are now.
type ExplainView struct {
	PodView
	Annotations   map[string]string `json:"annotations"`
	ParseError    string            `json:"parseError,omitempty"`
	DemandCPUs    int               `json:"demandCPUs"`
	Untouched     bool              `json:"untouched"`
	KubeletStatic bool              `json:"kubeletStatic"`
	Decision      string            `json:"decision"`
	Cgroups       []CgroupView      `json:"cgroups"`
	Events        []EventRecord     `json:"events"`
}

// CgroupView is one cgroup's current cpuset.cpus.
type CgroupView struct {
	Path  string `json:"path"`
	CPUs  string `json:"cpus"`
	Error string `json:"error,omitempty"`
}

func (c *controller) podView(p podInfo) PodView {
	v := PodView{Namespace: p.Namespace, Name: p.Name, UID: p.UID, QoS: p.QoS, Pool: p.Req.Pool}
	st := c.pools.State()
	switch {
	case p.Untouched:
		v.State = "Untouched"
		if p.KubeletStatic {
			v.Reason = "KubeletStatic"
		} else if p.Req.Pool != PoolNone {
			v.Reason = "NotManaged"
		}
	case p.ReqErr != nil:
		v.State, v.Reason = string(StateRefused), Reason(p.ReqErr)
	default:
		a, ok := st.Assignment(p.UID)
		switch {
		case ok && a.ReleaseIsolation:
			v.State = string(StateReleased)
		case ok:
			v.State = string(StateAllocated)
		case p.Req.Pool == PoolExclusive:
			v.State = string(StateRefused)
		default:
			v.State = string(StateShared)
		}
	}
	if !p.Untouched {
		c.pools.mu.Lock()
		t, _ := c.pools.target(p)
		c.pools.mu.Unlock()
		v.CPUs = t.String()
	}
	return v
}

func (c *controller) explain(key string) (ExplainView, error) {
	ns, name, _ := strings.Cut(key, "/")
	pod, err := c.lister.Pods(ns).Get(name)
	if err != nil {
		return ExplainView{}, err
	}
	p := c.podInfo(pod)
	v := ExplainView{PodView: c.podView(p), Annotations: map[string]string{}, DemandCPUs: p.DemandCPUs, Untouched: p.Untouched, KubeletStatic: p.KubeletStatic}
	for k, val := range pod.Annotations {
		if strings.HasPrefix(k, "cgpilot.io/") {
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
	case v.State == string(StateAllocated):
		v.Decision = "exclusive cpus " + v.CPUs + ", CFS quota removed on pod and containers"
	case v.State == string(StateReleased):
		v.Decision = "exclusive, isolation released: runs on all non-reserved cpus " + v.CPUs
	case p.Req.Pool == PoolExclusive:
		v.Decision = "exclusive request not granted (see status annotation and events); runs on the shared pool"
	default:
		v.Decision = "shared pool " + v.CPUs
	}
	if pp, err := c.pools.cg.PodPath(p.UID, p.QoS); err == nil {
		paths := []string{pp}
		children, _ := c.pools.cg.Children(pp)
		for _, path := range append(paths, children...) {
			cv := CgroupView{Path: path}
			if set, err := c.pools.cg.ReadCPUs(path); err != nil {
				cv.Error = err.Error()
			} else {
				cv.CPUs = set.String()
			}
			v.Cgroups = append(v.Cgroups, cv)
		}
	}
	v.Events = c.events.Recent(ns, name)
	return v, nil
}

func (c *controller) apiHandler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			v = map[string]string{"error": err.Error()}
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		out := []PodView{}
		for _, p := range c.allPods() {
			out = append(out, c.podView(p))
		}
		reply(w, out, nil)
	})
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		v := PoolsView{NodeSummary: c.summary(), Assignments: []AssignmentView{}}
		for _, a := range c.pools.State().Assignments() {
			v.Assignments = append(v.Assignments, AssignmentView{a.Namespace, a.Name, a.UID, a.CPUs.String(), a.ReleaseIsolation})
		}
		reply(w, v, nil)
	})
	mux.HandleFunc("GET /v1/topology", func(w http.ResponseWriter, r *http.Request) {
		st := c.pools.State()
		reply(w, TopologyView{CPUs: st.All().String(), Reserved: st.Reserved().String(), Source: c.pools.topologySource, Machine: c.topo}, nil)
	})
	mux.HandleFunc("GET /v1/explain", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("pod")
		if !strings.Contains(key, "/") {
			reply(w, nil, fmt.Errorf("want ?pod=NAMESPACE/NAME, got %q", key))
			return
		}
		v, err := c.explain(key)
		reply(w, v, err)
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		ns, name, _ := strings.Cut(r.URL.Query().Get("pod"), "/")
		out := c.events.Recent(ns, name)
		if out == nil {
			out = []EventRecord{}
		}
		reply(w, out, nil)
	})
	return mux
}

// listenUnix listens on path with mode 0600. A stale socket from a
// previous run is removed; any other file there is an error.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("local API socket %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
