package pools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// Checkpoint format: atomicfile's checksummed JSON envelope (Seal), whose
// checksum covers the exact encoded bytes of "data" (not a printed Go
// struct), so any edit of the payload is detected and the format can be
// decoded without Go type names.
//
//	{"version":1,"checksum":"<sha256 hex of data>","data":{"assignments":[...]}}
//
// A later format that only adds fields sets "minReader":1, and this reader
// decodes the fields it knows; one that needs a newer reader is refused
// (ErrCheckpointVersion) and left in place, never moved aside or
// overwritten: a downgraded agent must not destroy its successor's state.
const checkpointVersion = 1

// Checkpoint errors.
var (
	ErrCheckpointNotFound = errors.New("checkpoint not found")
	ErrCheckpointCorrupt  = errors.New("checkpoint corrupt")
	ErrCheckpointVersion  = errors.New("checkpoint written by a newer agent")
	ErrCheckpointWrite    = errors.New("checkpoint write failed")
)

// CorruptCheckpointError is a checkpoint that does not verify (Want and
// Got, the stored and computed checksums) or decode (Reason): the one
// corrupt-file error of cgpilot's checkpoints, atomicfile.CorruptError,
// with Kind ErrCheckpointCorrupt.
type CorruptCheckpointError = atomicfile.CorruptError

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

// encodeCheckpoint returns the file bytes for the given assignments, in UID
// order so that equal states give equal files.
func encodeCheckpoint(assigned map[string]Assignment) []byte {
	d := checkpointDataV1{Assignments: []checkpointEntryV1{}}
	for _, a := range assigned {
		d.Assignments = append(d.Assignments, checkpointEntryV1{a.UID, a.Namespace, a.Name, a.CPUs.String(), a.ReleaseIsolation})
	}
	sort.Slice(d.Assignments, func(i, j int) bool { return d.Assignments[i].UID < d.Assignments[j].UID })
	data, _ := json.Marshal(d) // strings and bools only: cannot fail
	return atomicfile.Seal(checkpointVersion, data)
}

// maxCheckpointBytes bounds what is read: a node holds at most one
// assignment per CPU.
const maxCheckpointBytes = 4 << 20

// decodeCheckpoint verifies and decodes file bytes. It never returns a
// partial state: either every entry is valid and disjoint, or an error.
func decodeCheckpoint(path string, b []byte) (map[string]Assignment, error) {
	corrupt := func(reason string) error {
		return &CorruptCheckpointError{Path: path, Reason: reason, Kind: ErrCheckpointCorrupt}
	}
	env, err := atomicfile.OpenEnvelope(path, b, maxCheckpointBytes, ErrCheckpointCorrupt)
	if err != nil {
		return nil, err
	}
	strict := true
	switch {
	case env.Version == checkpointVersion:
	case env.Version > checkpointVersion && env.MinReader >= 1 && env.MinReader <= checkpointVersion:
		strict = false // a newer format this agent can read: known fields only
	case env.Version > checkpointVersion:
		return nil, fmt.Errorf("%w: %s has format %d (reader %d or newer); this agent reads %d: roll the agent forward, or delete the file to rebuild the pools from the pods",
			ErrCheckpointVersion, path, env.Version, max(env.MinReader, env.Version), checkpointVersion)
	default:
		return nil, corrupt(fmt.Sprintf("version %d", env.Version))
	}
	if err := env.Verify(path, ErrCheckpointCorrupt); err != nil {
		return nil, err
	}
	var d checkpointDataV1
	dd := json.NewDecoder(bytes.NewReader(env.Data))
	if strict {
		dd.DisallowUnknownFields()
	}
	if err := dd.Decode(&d); err != nil {
		return nil, corrupt("data: " + err.Error())
	}
	out := map[string]Assignment{}
	taken := map[int]string{}
	for _, e := range d.Assignments {
		cpus, err := cpulist.Parse(e.CPUs)
		if err != nil || cpus.IsEmpty() {
			return nil, corrupt(fmt.Sprintf("pod %s: cpus %q", e.UID, e.CPUs))
		}
		if e.UID == "" {
			return nil, corrupt("entry without uid")
		}
		if _, dup := out[e.UID]; dup {
			return nil, corrupt("duplicate pod " + e.UID)
		}
		for _, c := range cpus.List() {
			if other, ok := taken[c]; ok {
				return nil, corrupt(fmt.Sprintf("pods %s and %s share cpu %d", other, e.UID, c))
			}
			taken[c] = e.UID
		}
		out[e.UID] = Assignment{UID: e.UID, Namespace: e.Namespace, Name: e.Name, CPUs: cpus, ReleaseIsolation: e.ReleaseIsolation}
	}
	return out, nil
}

// ReadCheckpoint loads a checkpoint file: ErrCheckpointNotFound when it is
// absent, an error wrapping ErrCheckpointCorrupt or ErrCheckpointVersion
// when it cannot be trusted.
func ReadCheckpoint(path string) (map[string]Assignment, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrCheckpointNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return decodeCheckpoint(path, b)
}

// writeCheckpoint replaces path atomically; "" keeps the state in memory
// only (tests).
func writeCheckpoint(path string, assigned map[string]Assignment) error {
	if path == "" {
		return nil
	}
	if err := atomicfile.WriteFile(path, encodeCheckpoint(assigned), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpointWrite, err)
	}
	return nil
}
