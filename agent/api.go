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

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
)

// api.go serves the local API (package local has the paths and views) on
// a unix socket that only root may use.

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
	v.Events = c.events.Recent(ns, name)
	return v, nil
}

func (c *controller) apiHandler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			v = local.ErrorView{Error: err.Error()}
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET "+local.PathPods, func(w http.ResponseWriter, r *http.Request) {
		out := []local.PodView{}
		for _, p := range c.allPods() {
			out = append(out, c.podView(p))
		}
		reply(w, out, nil)
	})
	mux.HandleFunc("GET "+local.PathPools, func(w http.ResponseWriter, r *http.Request) {
		v := local.PoolsView{NodeSummary: c.summary(), Assignments: []local.AssignmentView{}}
		for _, a := range c.pools.State().Assignments() {
			v.Assignments = append(v.Assignments, local.AssignmentView{Namespace: a.Namespace, Name: a.Name, UID: a.UID, CPUs: a.CPUs.String(), ReleaseIsolation: a.ReleaseIsolation})
		}
		reply(w, v, nil)
	})
	mux.HandleFunc("GET "+local.PathTopology, func(w http.ResponseWriter, r *http.Request) {
		st := c.pools.State()
		reply(w, local.TopologyView{CPUs: st.All().String(), Reserved: st.Reserved().String(), Source: c.topologySource, Machine: c.topo}, nil)
	})
	mux.HandleFunc("GET "+local.PathExplain, func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("pod")
		if !strings.Contains(key, "/") {
			reply(w, nil, fmt.Errorf("want ?pod=NAMESPACE/NAME, got %q", key))
			return
		}
		v, err := c.explain(key)
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+local.PathEvents, func(w http.ResponseWriter, r *http.Request) {
		ns, name, _ := strings.Cut(r.URL.Query().Get("pod"), "/")
		reply(w, c.events.Recent(ns, name), nil)
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
