package kube

import (
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/internal/loop"
)

// GuardHandlers runs each informer event as an iteration of name: a
// handler that panics inside client-go's informer would end the process
// (its HandleCrash re-panics).
func GuardHandlers(g *loop.Guard, name string, h cache.ResourceEventHandlerFuncs) cache.ResourceEventHandlerFuncs {
	out := cache.ResourceEventHandlerFuncs{}
	if h.AddFunc != nil {
		out.AddFunc = func(obj any) { _ = g.Do(name, func() { h.AddFunc(obj) }) }
	}
	if h.UpdateFunc != nil {
		out.UpdateFunc = func(old, obj any) { _ = g.Do(name, func() { h.UpdateFunc(old, obj) }) }
	}
	if h.DeleteFunc != nil {
		out.DeleteFunc = func(obj any) { _ = g.Do(name, func() { h.DeleteFunc(obj) }) }
	}
	return out
}

// FieldManager names the agent's writes in managedFields.
const FieldManager = "cgpilot-agent"

// PatchTimeout is the deadline of one patch; the client's own timeouts
// are longer.
const PatchTimeout = 10 * time.Second
