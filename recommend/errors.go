package recommend

import "errors"

// Sentinel errors; every error the package returns wraps one of them with %w
// and names the offending file, line or value.
var (
	// ErrInvalidOptions: histogram options that describe no usable layout.
	ErrInvalidOptions = errors.New("recommend: invalid histogram options")
	// ErrOptionsMismatch: merging histograms with different options.
	ErrOptionsMismatch = errors.New("recommend: histogram options differ")
	// ErrCorruptHistogram: an encoded histogram that does not decode.
	ErrCorruptHistogram = errors.New("recommend: corrupt histogram encoding")
	// ErrInvalidPolicy: a policy with out-of-range settings.
	ErrInvalidPolicy = errors.New("recommend: invalid policy")
	// ErrUnknownPolicy: a preset name that does not exist.
	ErrUnknownPolicy = errors.New("recommend: unknown policy preset")
	// ErrTrace: a malformed usage trace (the error names the line).
	ErrTrace = errors.New("recommend: bad trace")
	// ErrCheckpoint: a checkpoint that cannot be used (see CorruptCheckpointError
	// and VersionError for the typed cases).
	ErrCheckpoint = errors.New("recommend: bad checkpoint")
	// ErrInvalidSample: a sample with a negative, NaN or infinite value.
	ErrInvalidSample = errors.New("recommend: invalid sample")
)

// ErrStaleSample: a sample older than the container's previous one.
var ErrStaleSample = errors.New("recommend: sample older than the previous one")
