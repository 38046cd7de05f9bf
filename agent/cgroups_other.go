//go:build !linux

package agent

import (
	"context"
	"errors"
)

func newBackend(Config) (cgroupBackend, error) {
	return nil, errors.New("cgpilot agent: cgroups exist on Linux only")
}

func (c *controller) watchCgroups(context.Context, cgroupBackend) error { return nil }
