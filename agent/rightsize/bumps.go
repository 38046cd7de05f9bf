package rightsize

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

// bumps.go: what the OOM path counts per container instance within
// OOMWindow: its kills (Kills, in memory only: the exponent of the next
// bump) and the times of its OOM bumps, which the policy's
// maxOOMBumpsPerDay counts. The bumps live in the agent's own state directory,
// not in the pod's annotation: a tenant can edit its pods' annotations,
// and forgetting the bumps at a restart would grant a container more
// raises that day than its policy allows. The file is small (at most
// maxBumpsKept times per container instance, instances of the last
// OOMWindow), in atomicfile's checksummed JSON envelope, written through
// atomicfile on each bump (a rare event, after the cgroup write).

// bumpsFile is the bump log's file in the checkpoint directory.
const bumpsFile = "oom-bumps.checkpoint"

// bumpsVersion is the bump log's format.
const bumpsVersion = 1

// maxBumpsKept bounds the times kept per instance: the policy's
// maxOOMBumpsPerDay is at most 24.
const maxBumpsKept = 32

// maxBumpsFileBytes bounds what a load reads.
const maxBumpsFileBytes = 4 << 20

// ErrCorruptBumps is the Kind of a bump log that does not verify.
var ErrCorruptBumps = errors.New("corrupt OOM bump log")

// loadBumps reads the bump log at path. A time after now counts as now
// (the clock went back, or the file came from elsewhere): it is still a
// bump. A missing file is an empty log.
func loadBumps(path string, now time.Time) (map[string][]time.Time, error) {
	out := map[string][]time.Time{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("OOM bump log: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBumpsFileBytes+1))
	if err != nil {
		return out, fmt.Errorf("OOM bump log: %w", err)
	}
	corrupt := func(reason string) error {
		return &atomicfile.CorruptError{Path: path, Reason: reason, Kind: ErrCorruptBumps}
	}
	env, err := atomicfile.OpenEnvelope(path, data, maxBumpsFileBytes, ErrCorruptBumps)
	if err != nil {
		return out, err
	}
	if env.Version != bumpsVersion {
		return out, corrupt(fmt.Sprintf("version %d, this agent reads %d", env.Version, bumpsVersion))
	}
	if err := env.Verify(path, ErrCorruptBumps); err != nil {
		return out, err
	}
	// The bump times of each container instance ("<pod UID>/<container>"),
	// in Unix nanoseconds.
	var bumps map[string][]int64
	if err := json.Unmarshal(env.Data, &bumps); err != nil {
		return out, corrupt("data: " + err.Error())
	}
	for inst, ts := range bumps {
		if len(ts) > maxBumpsKept {
			return map[string][]time.Time{}, corrupt(fmt.Sprintf("%d bumps of %s", len(ts), inst))
		}
		for _, n := range ts {
			t := time.Unix(0, n)
			if t.After(now) {
				t = now
			}
			out[inst] = append(out[inst], t)
		}
	}
	return out, nil
}

// saveBumps writes the log's times within window before now.
func saveBumps(path string, log map[string][]time.Time, now time.Time, window time.Duration) error {
	bumps := map[string][]int64{}
	for inst, ts := range log {
		for _, t := range ts {
			if now.Sub(t) < window {
				bumps[inst] = append(bumps[inst], t.UnixNano())
			}
		}
	}
	data, err := json.Marshal(bumps) // map keys sorted: equal logs, equal files
	if err != nil {
		return err
	}
	data = atomicfile.Seal(bumpsVersion, data)
	return atomicfile.WriteFile(path, data, 0o600)
}

// openBumps loads the bump log of checkpoint directory dir; a corrupt
// log is quarantined and the log starts empty (the error says so).
func openBumps(dir string, now time.Time) (map[string][]time.Time, error) {
	if dir == "" {
		return map[string][]time.Time{}, nil
	}
	path := filepath.Join(dir, bumpsFile)
	_, _ = atomicfile.Clean(path, 3)
	log, err := loadBumps(path, now)
	var ce *atomicfile.CorruptError
	if errors.As(err, &ce) {
		if aside, qerr := atomicfile.Quarantine(path, now); qerr == nil {
			err = fmt.Errorf("%w (moved aside as %s; the OOM bump counts start at 0)", err, aside)
		}
	}
	return log, err
}

// Kills records an OOM kill of one container instance at t and returns the
// kills within window, this one included.
func (e *Engine) Kills(instance string, t time.Time, window time.Duration) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.ooms[instance][:0]
	for _, k := range e.ooms[instance] {
		if t.Sub(k) < window {
			kept = append(kept, k)
		}
	}
	e.ooms[instance] = append(kept, t)
	return len(e.ooms[instance])
}

// ExpireKills drops the OOM kills and bumps older than window, so that
// containers that are gone leave nothing behind.
func (e *Engine) ExpireKills(now time.Time, window time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expireBumps(now, window)
	for inst, ts := range e.ooms {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1]) > window {
			delete(e.ooms, inst)
		}
	}
}

// Bumps is how many OOM bumps container instance ("<pod UID>/<container>")
// had within window before now.
func (e *Engine) Bumps(instance string, now time.Time, window time.Duration) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, t := range e.bumps[instance] {
		if now.Sub(t) < window {
			n++
		}
	}
	return n
}

// RecordBump records an OOM bump of instance at t and writes the bump log
// (with a checkpoint directory). The bump counts even when the write
// fails; the error says the count may not survive a restart.
//
// The file is written outside e.mu (an fsync must not hold up sampling
// and decisions), under bumpsWrite, from a copy taken with the bump: two
// writers never interleave, and the last file holds every bump recorded.
func (e *Engine) RecordBump(instance string, t time.Time, window time.Duration) error {
	e.bumpsWrite.Lock()
	defer e.bumpsWrite.Unlock()
	e.mu.Lock()
	ts := append(e.bumps[instance], t)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	if len(ts) > maxBumpsKept {
		ts = ts[len(ts)-maxBumpsKept:]
	}
	e.bumps[instance] = ts
	var log map[string][]time.Time
	if e.dir != "" {
		log = make(map[string][]time.Time, len(e.bumps))
		for k, v := range e.bumps {
			log[k] = slices.Clone(v)
		}
	}
	e.mu.Unlock()
	if log == nil {
		return nil
	}
	if err := saveBumps(filepath.Join(e.dir, bumpsFile), log, t, window); err != nil {
		return fmt.Errorf("OOM bump of %s counted, but not saved (a restart forgets it): %w", instance, err)
	}
	return nil
}

// expireBumps drops the instances whose last bump is older than window.
// e.mu held.
func (e *Engine) expireBumps(now time.Time, window time.Duration) {
	for inst, ts := range e.bumps {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= window {
			delete(e.bumps, inst)
		}
	}
}
