package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Checkpoint format: a JSON envelope whose checksum covers the exact encoded
// bytes of "data" (not a printed Go struct), so any edit of the payload is
// detected and the format can be decoded without Go type names.
//
//	{"version":1,"checksum":"<sha256 hex of data>","data":{"assignments":[...]}}
const checkpointVersion = 1

// Checkpoint errors.
var (
	ErrCheckpointNotFound = errors.New("checkpoint not found")
	ErrCheckpointCorrupt  = errors.New("checkpoint corrupt")
	ErrCheckpointVersion  = errors.New("checkpoint version not supported")
	ErrCheckpointWrite    = errors.New("checkpoint write failed")
)

// CorruptCheckpointError carries the expected and actual checksums (empty
// when the file did not even decode).
type CorruptCheckpointError struct {
	Path     string
	Expected string
	Actual   string
	Detail   string
}

func (e *CorruptCheckpointError) Error() string {
	if e.Expected != e.Actual {
		return fmt.Sprintf("checkpoint %s corrupt: checksum %s, want %s", e.Path, e.Actual, e.Expected)
	}
	return fmt.Sprintf("checkpoint %s corrupt: %s", e.Path, e.Detail)
}

func (e *CorruptCheckpointError) Unwrap() error { return ErrCheckpointCorrupt }

type checkpointEnvelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

type checkpointDataV1 struct {
	Assignments []checkpointEntryV1 `json:"assignments"`
}

type checkpointEntryV1 struct {
	UID              string `json:"uid"`
	Namespace        string `json:"namespace"`
	Name             string `json:"name"`
	CPUs             string `json:"cpus"`
	ReleaseIsolation bool   `json:"releaseIsolation,omitempty"`
}

func checksum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// encodeCheckpoint returns the file bytes for the given assignments, in UID
// order so that equal states give equal files.
func encodeCheckpoint(assigned map[string]Assignment) []byte {
	d := checkpointDataV1{Assignments: []checkpointEntryV1{}}
	for _, a := range assigned {
		d.Assignments = append(d.Assignments, checkpointEntryV1{a.UID, a.Namespace, a.Name, a.CPUs.String(), a.ReleaseIsolation})
	}
	sort.Slice(d.Assignments, func(i, j int) bool { return d.Assignments[i].UID < d.Assignments[j].UID })
	data, _ := json.Marshal(d) // strings and bools only: cannot fail
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"version":%d,"checksum":%q,"data":`, checkpointVersion, checksum(data))
	b.Write(data)
	b.WriteString("}\n")
	return b.Bytes()
}

// decodeCheckpoint verifies and decodes file bytes. It never returns a
// partial state: either every entry is valid and disjoint, or an error.
func decodeCheckpoint(path string, b []byte) (map[string]Assignment, error) {
	corrupt := func(detail string) error { return &CorruptCheckpointError{Path: path, Detail: detail} }
	var env checkpointEnvelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, corrupt("envelope: " + err.Error())
	}
	if dec.More() {
		return nil, corrupt("trailing data after envelope")
	}
	if env.Version != checkpointVersion {
		return nil, fmt.Errorf("%w: %s has version %d, this agent reads %d", ErrCheckpointVersion, path, env.Version, checkpointVersion)
	}
	if got := checksum(env.Data); got != env.Checksum {
		return nil, &CorruptCheckpointError{Path: path, Expected: env.Checksum, Actual: got}
	}
	var d checkpointDataV1
	dd := json.NewDecoder(bytes.NewReader(env.Data))
	dd.DisallowUnknownFields()
	if err := dd.Decode(&d); err != nil {
		return nil, corrupt("data: " + err.Error())
	}
	out := map[string]Assignment{}
	for _, e := range d.Assignments {
		cpus, err := ParseCPUList(e.CPUs)
		if err != nil || cpus.IsEmpty() {
			return nil, corrupt(fmt.Sprintf("pod %s: cpus %q", e.UID, e.CPUs))
		}
		if e.UID == "" {
			return nil, corrupt("entry without uid")
		}
		if _, dup := out[e.UID]; dup {
			return nil, corrupt("duplicate pod " + e.UID)
		}
		for _, o := range out {
			if !o.CPUs.Intersection(cpus).IsEmpty() {
				return nil, corrupt(fmt.Sprintf("pods %s and %s share cpus %s", o.UID, e.UID, o.CPUs.Intersection(cpus)))
			}
		}
		out[e.UID] = Assignment{UID: e.UID, Namespace: e.Namespace, Name: e.Name, CPUs: cpus, ReleaseIsolation: e.ReleaseIsolation}
	}
	return out, nil
}

// readCheckpoint loads path. ErrCheckpointNotFound when absent.
func readCheckpoint(path string) (map[string]Assignment, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrCheckpointNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return decodeCheckpoint(path, b)
}

// writeCheckpoint replaces path atomically: a dot-prefixed temp file in the
// same directory, fsync, rename, then fsync of the directory so the rename
// itself survives a power loss.
func writeCheckpoint(path string, assigned map[string]Assignment) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCheckpointWrite, path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCheckpointWrite, path, err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("%w: %s: %v", ErrCheckpointWrite, path, err)
	}
	if _, err := tmp.Write(encodeCheckpoint(assigned)); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%w: %s: %v", ErrCheckpointWrite, path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: open dir: %v", ErrCheckpointWrite, path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: %s: fsync dir: %v", ErrCheckpointWrite, path, err)
	}
	return nil
}

// quarantineCheckpoint moves a bad checkpoint aside (kept for post-mortems)
// and returns the new name.
func quarantineCheckpoint(path string, now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405.000000000"))
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("move corrupt checkpoint %s aside: %w", path, err)
	}
	return aside, nil
}
