package atomicfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// envelope.go: the checksummed JSON envelope of cgpilot's JSON state files
// (the pools' checkpoint, the OOM bump log). The checksum covers the exact
// encoded bytes of "data", not a printed Go value, so any edit of the
// payload is detected:
//
//	{"version":1,"checksum":"<sha256 hex of data>","data":{...}}
//
// A later format that only adds fields sets "minReader"; what a reader
// does with a version is the reader's rule, not this file's.

// Envelope is a decoded envelope; Verify checks its checksum.
type Envelope struct {
	Version   int             `json:"version"`
	MinReader int             `json:"minReader,omitempty"`
	Checksum  string          `json:"checksum"`
	Data      json.RawMessage `json:"data"`
}

// Checksum is the envelope's checksum of data: SHA-256 in hex.
func Checksum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Seal returns the file bytes of data (JSON) under version.
func Seal(version int, data []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"version":%d,"checksum":%q,"data":`, version, Checksum(data))
	b.Write(data)
	b.WriteString("}\n")
	return b.Bytes()
}

// OpenEnvelope decodes the envelope of file path's bytes b (at most max
// bytes, no unknown fields, nothing after it); it does not verify the
// checksum, so that a reader can judge the version first. Errors are
// *CorruptError of kind.
func OpenEnvelope(path string, b []byte, max int, kind error) (Envelope, error) {
	var env Envelope
	if len(b) > max {
		return env, &CorruptError{Path: path, Reason: fmt.Sprintf("%d bytes, at most %d", len(b), max), Kind: kind}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return env, &CorruptError{Path: path, Reason: "envelope: " + err.Error(), Kind: kind}
	}
	if dec.More() {
		return env, &CorruptError{Path: path, Reason: "trailing data after envelope", Kind: kind}
	}
	return env, nil
}

// Verify checks the envelope's checksum; the error is a *CorruptError of
// kind naming both sums.
func (e Envelope) Verify(path string, kind error) error {
	if got := Checksum(e.Data); got != e.Checksum {
		return &CorruptError{Path: path, Want: e.Checksum, Got: got, Kind: kind}
	}
	return nil
}
