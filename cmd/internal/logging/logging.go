// Package logging makes the logr.Logger of cgpilot's commands: zap
// behind logr, JSON to stderr, ISO 8601 times, no sampling (a node agent
// must not drop the line that explains an incident) and no stack traces,
// with client-go's klog sent through the same core. It exists so that the
// agent and the aggregator log alike from one place.
//
// It imports zap, zapr and klog only; it lives under cmd/ because only
// commands set up logging (libraries take a logr.Logger).
package logging

import (
	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// New returns the logger (debug: also V(1) lines) and a flush to call
// before exit.
func New(debug bool) (logr.Logger, func(), error) {
	level := zapcore.InfoLevel
	if debug {
		level = zapcore.DebugLevel
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Sampling = nil
	zc.DisableStacktrace = true
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zl, err := zc.Build()
	if err != nil {
		return logr.Discard(), func() {}, err
	}
	log := zapr.NewLogger(zl)
	klog.SetLogger(log.WithName("client-go"))
	return log, func() { _ = zl.Sync() }, nil
}
