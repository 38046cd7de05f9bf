package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// podResources reads the kubelet's exclusive CPU assignments from its
// PodResources API. The kubelet reports there only CPUs its static CPU
// manager assigned exclusively; shared containers list none.
type podResources struct {
	socket string
	mu     sync.Mutex
	conn   *grpc.ClientConn
}

// maxPodResourcesBytes bounds one answer (a node has at most a few hundred
// pods).
const maxPodResourcesBytes = 16 << 20

func (r *podResources) client() (podresourcesv1.PodResourcesListerClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		conn, err := grpc.NewClient("unix://"+r.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodResourcesBytes)))
		if err != nil {
			return nil, err
		}
		r.conn = conn
	}
	return podresourcesv1.NewPodResourcesListerClient(r.conn), nil
}

// read lists the kubelet's pods; pods are keyed "namespace/name".
func (r *podResources) read(ctx context.Context) (kubeletStatic, error) {
	empty := kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}}
	c, err := r.client()
	if err != nil {
		return empty, fmt.Errorf("%w: %s: %v", ErrKubeletState, r.socket, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The CPUs the kubelet may give exclusively: none unless its CPU
	// manager policy is static. Knowing "none" spares a List (every pod
	// of the node) at each reconcile of a Guaranteed pod with whole CPUs:
	// cgpilot's own exclusive pods are such pods. A kubelet without the
	// call (before 1.23) leaves the policy unknown, read as static.
	policy := "podresources"
	if alloc, err := c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{}); err == nil {
		if len(alloc.GetCpuIds()) == 0 {
			return kubeletStatic{Policy: "none", Taken: cpuset.New(), Pods: map[string]bool{}}, nil
		}
		policy = "static"
	}
	resp, err := c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return empty, fmt.Errorf("%w: PodResources List on %s: %v", ErrKubeletState, r.socket, err)
	}
	out := kubeletStatic{Policy: policy, Taken: cpuset.New(), Pods: map[string]bool{}}
	var ids []int
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			if len(ctr.GetCpuIds()) == 0 {
				continue
			}
			for _, id := range ctr.GetCpuIds() {
				if id < 0 || id > cpulist.MaxID {
					return empty, fmt.Errorf("%w: pod %s/%s container %s: cpu id %d", ErrKubeletState, p.GetNamespace(), p.GetName(), ctr.GetName(), id)
				}
				ids = append(ids, int(id))
			}
			out.Pods[podspec.Key(p.GetNamespace(), p.GetName())] = true
		}
	}
	out.Taken = cpuset.New(ids...)
	return out, nil
}

func (r *podResources) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}
