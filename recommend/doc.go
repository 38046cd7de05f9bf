// Package recommend turns usage samples into resource recommendations with
// exponential-bucket decaying histograms in the manner of the Kubernetes VPA.
//
// It imports no k8s.io/* package, and none of topology, cgroup or agent.
package recommend
