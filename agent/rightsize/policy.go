package rightsize

import (
	"time"

	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// policy.go: what a RightsizePolicy and a pod's annotations ask. The
// policy compiler (api/v1alpha1/policy) is their one home, shared with
// the aggregator and its webhook; these names are its own, so that
// decide.go reads in this package's terms.

// Sentinels (the compiler's).
var (
	ErrInvalidPolicy     = apipolicy.ErrInvalidPolicy
	ErrInvalidAnnotation = apipolicy.ErrInvalidAnnotation
)

type (
	// Policy is a compiled RightsizePolicy.
	Policy = apipolicy.Policy
	// Mode is what the agent does for a pod.
	Mode = apipolicy.Mode
	// Limits is what happens to limits when requests change.
	Limits = apipolicy.Limits
	// Window is a recurring time without changes.
	Window = apipolicy.Window
)

const (
	ModeOff     = apipolicy.ModeOff
	ModeDryRun  = apipolicy.ModeDryRun
	ModeInPlace = apipolicy.ModeInPlace
	ModeAuto    = apipolicy.ModeAuto

	LimitsKeepRatio = apipolicy.LimitsKeepRatio
	LimitsUnset     = apipolicy.LimitsUnset
	LimitsKeep      = apipolicy.LimitsKeep

	DefaultStep       = apipolicy.DefaultStep
	DefaultMinHistory = apipolicy.DefaultMinHistory
)

// ParseWindow reads a cron schedule and a duration (apipolicy.ParseWindow).
func ParseWindow(spec string, d time.Duration) (Window, error) { return apipolicy.ParseWindow(spec, d) }
