package atomicfile

import "fmt"

// CorruptError is a state file whose bytes do not verify or decode, the
// one form of "corrupt" of every cgpilot checkpoint reader (agent/pools,
// recommend): the file to Quarantine. Kind is the reader's own sentinel,
// so errors.Is(err, Kind) holds for the reader's callers, and one
// errors.As tells a corrupt file from a missing or a newer one.
type CorruptError struct {
	Path string
	// Want and Got are the stored and the computed checksum, when the
	// checksum failed; otherwise Reason says what did not decode.
	Want, Got string
	Reason    string
	// Kind is the reader's sentinel: what Unwrap returns and the
	// message starts with.
	Kind error
}

func (e *CorruptError) Error() string {
	kind := "corrupt file"
	if e.Kind != nil {
		kind = e.Kind.Error()
	}
	if e.Want != "" || e.Got != "" {
		return fmt.Sprintf("%s: %s: checksum %s, computed %s", kind, e.Path, e.Want, e.Got)
	}
	return fmt.Sprintf("%s: %s: %s", kind, e.Path, e.Reason)
}

// Unwrap is Kind.
func (e *CorruptError) Unwrap() error { return e.Kind }
