package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sort"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// sortByTime orders workloads by when they were last written, oldest
// (or never) first, then by name.
func sortByTime(ws []report.Workload, at map[report.Workload]time.Time) {
	sort.Slice(ws, func(i, j int) bool {
		a, b := at[ws[i]], at[ws[j]]
		if !a.Equal(b) {
			return a.Before(b)
		}
		return ws[i].String() < ws[j].String()
	})
}

var metav1PatchOptions = metav1.PatchOptions{FieldManager: FieldManager}
