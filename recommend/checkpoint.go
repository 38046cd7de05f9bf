package recommend

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A checkpoint keeps only what cannot be recomputed: the histograms and the
// little per-container state around them. On disk it is a JSON envelope
//
//	{"version":1,"checksum":"sha256:<hex of payload bytes>","payload":{...}}
//
// whose checksum covers the payload's exact bytes as stored (not a printed
// Go value). The payload repeats the version, so a version edited in the
// envelope alone fails the checksum or the cross-check.
const (
	// CheckpointVersion is the version SaveCheckpoint writes.
	CheckpointVersion = 1
	// MaxCheckpointBytes bounds what LoadCheckpoint reads.
	MaxCheckpointBytes = 256 << 20
	// MaxCheckpointContainers bounds the containers of one checkpoint.
	MaxCheckpointContainers = 1 << 20
)

// CorruptCheckpointError is a checkpoint whose bytes do not verify or decode.
type CorruptCheckpointError struct {
	Path      string
	Want, Got string // checksums, when the checksum failed
	Reason    string
}

func (e *CorruptCheckpointError) Error() string {
	if e.Want != "" {
		return fmt.Sprintf("recommend: checkpoint %s is corrupt: checksum %s, computed %s", e.Path, e.Want, e.Got)
	}
	return fmt.Sprintf("recommend: checkpoint %s is corrupt: %s", e.Path, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCheckpoint) true.
func (e *CorruptCheckpointError) Unwrap() error { return ErrCheckpoint }

// VersionError is a checkpoint written by a newer (or unknown) format.
type VersionError struct {
	Path      string
	Version   int
	Supported int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("recommend: checkpoint %s has version %d, this build reads up to %d", e.Path, e.Version, e.Supported)
}

// Unwrap makes errors.Is(err, ErrCheckpoint) true.
func (e *VersionError) Unwrap() error { return ErrCheckpoint }

type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Payload  json.RawMessage `json:"payload"`
}

type payloadV1 struct {
	Version    int           `json:"version"`
	Policy     string        `json:"policy"`
	Engine     Engine        `json:"engine"`
	SavedAt    time.Time     `json:"saved_at"`
	Containers []containerV1 `json:"containers"`
}

type resourceV1 struct {
	Hist    []byte    `json:"hist"`
	Fast    []byte    `json:"fast,omitempty"`
	PeakEnd time.Time `json:"peak_end"`
	Peak    float64   `json:"peak"`
	Held    float64   `json:"held"`
}

type vpaV1 struct {
	CPU           []byte    `json:"cpu"`
	Mem           []byte    `json:"mem"`
	FirstCPU      time.Time `json:"first_cpu"`
	LastCPU       time.Time `json:"last_cpu"`
	LastCPUSample time.Time `json:"last_cpu_sample"`
	CPUSamples    int64     `json:"cpu_samples"`
	MemPeak       int64     `json:"mem_peak"`
	OOMPeak       int64     `json:"oom_peak"`
	WindowEnd     time.Time `json:"window_end"`
	LastMemSample time.Time `json:"last_mem_sample"`
}

type containerV1 struct {
	ID        string      `json:"id"`
	First     time.Time   `json:"first"`
	Last      time.Time   `json:"last"`
	Samples   int64       `json:"samples"`
	CPU       *resourceV1 `json:"cpu,omitempty"`
	Mem       *resourceV1 `json:"mem,omitempty"`
	VPA       *vpaV1      `json:"vpa,omitempty"`
	Spec      Resources   `json:"spec"`
	OOMKills  []time.Time `json:"oom_kills,omitempty"`
	OOMLimit  float64     `json:"oom_limit,omitempty"`
	LastOOMAt time.Time   `json:"last_oom_at"`
}

func marshalHist(h *Histogram) []byte {
	if h == nil {
		return nil
	}
	b, _ := h.MarshalBinary()
	return b
}

func encodeResource(s *resourceState) *resourceV1 {
	return &resourceV1{Hist: marshalHist(s.hist), Fast: marshalHist(s.fast), PeakEnd: s.peakEnd, Peak: s.peak, Held: s.held}
}

// EncodeCheckpoint returns the checkpoint bytes of the current state.
func (r *Recommender) EncodeCheckpoint(now time.Time) ([]byte, error) {
	r.mu.Lock()
	p := payloadV1{Version: CheckpointVersion, Policy: r.policy.Name, Engine: r.policy.Engine, SavedAt: now.UTC(),
		Containers: make([]containerV1, 0, len(r.containers))}
	for id, c := range r.containers {
		cv := containerV1{ID: id, First: c.first, Last: c.last, Samples: c.samples, Spec: c.spec,
			OOMKills: c.oomKills, OOMLimit: c.oomLimit, LastOOMAt: c.lastOOMAt}
		if v := c.vpa; v != nil {
			cv.VPA = &vpaV1{CPU: marshalHist(v.cpu), Mem: marshalHist(v.mem), FirstCPU: v.firstCPU, LastCPU: v.lastCPU,
				LastCPUSample: v.lastCPUSample, CPUSamples: v.cpuSamples, MemPeak: v.memPeak, OOMPeak: v.oomPeak,
				WindowEnd: v.windowEnd, LastMemSample: v.lastMemSample}
		} else {
			cv.CPU, cv.Mem = encodeResource(&c.cpu), encodeResource(&c.mem)
		}
		p.Containers = append(p.Containers, cv)
	}
	r.mu.Unlock()
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrCheckpoint, err)
	}
	return json.Marshal(envelope{Version: CheckpointVersion, Checksum: checksumOf(payload), Payload: payload})
}

func checksumOf(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SaveCheckpoint writes the state to path atomically: a temporary file in
// the same directory is written, fsynced and renamed over path, then the
// directory is fsynced, so a crash leaves either the old or the new file.
func (r *Recommender) SaveCheckpoint(path string, now time.Time) error {
	data, err := r.EncodeCheckpoint(now)
	if err != nil {
		return err
	}
	if len(data) > MaxCheckpointBytes {
		return fmt.Errorf("%w: %s: %d bytes exceed the %d-byte bound", ErrCheckpoint, path, len(data), MaxCheckpointBytes)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCheckpoint, path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrCheckpoint, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("%w: fsync %s: %w", ErrCheckpoint, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %w", ErrCheckpoint, tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%w: rename %s to %s: %w", ErrCheckpoint, tmp.Name(), path, err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: open dir %s: %w", ErrCheckpoint, dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: fsync dir %s: %w", ErrCheckpoint, dir, err)
	}
	return nil
}

// LoadCheckpoint replaces the state with the checkpoint at path, all or
// nothing. A missing file returns an error wrapping fs.ErrNotExist. A
// corrupt, oversized, foreign-policy or future-version file returns a
// *CorruptCheckpointError or *VersionError (both wrap ErrCheckpoint), is
// renamed to path + ".corrupt" so that the next save does not lose the
// evidence, and leaves the state untouched (fresh at startup).
func (r *Recommender) LoadCheckpoint(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxCheckpointBytes+1))
	f.Close()
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrCheckpoint, path, err)
	}
	err = r.DecodeCheckpoint(path, data)
	var ce *CorruptCheckpointError
	var ve *VersionError
	if errors.As(err, &ce) || errors.As(err, &ve) {
		if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
			return fmt.Errorf("%w (and moving it aside failed: %w)", err, rerr)
		}
	}
	return err
}

// DecodeCheckpoint replaces the state with the checkpoint in data, all or
// nothing; name labels errors.
func (r *Recommender) DecodeCheckpoint(name string, data []byte) error {
	corrupt := func(format string, args ...any) error {
		return &CorruptCheckpointError{Path: name, Reason: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxCheckpointBytes {
		return corrupt("more than %d bytes", MaxCheckpointBytes)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return corrupt("envelope: %v", err)
	}
	if env.Version < 1 || env.Version > CheckpointVersion {
		return &VersionError{Path: name, Version: env.Version, Supported: CheckpointVersion}
	}
	if got := checksumOf(env.Payload); got != env.Checksum {
		return &CorruptCheckpointError{Path: name, Want: env.Checksum, Got: got}
	}
	// Version 1 is the only format so far; a v2 decoder would add
	// migrateV1(payloadV1) → payloadV2 here.
	containers, err := r.decodeV1(env.Payload)
	if err != nil {
		return corrupt("%v", err)
	}
	r.mu.Lock()
	r.containers = containers
	r.mu.Unlock()
	return nil
}

func (r *Recommender) decodeV1(raw []byte) (map[string]*container, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p payloadV1
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("payload version %d inside a version 1 envelope", p.Version)
	}
	if p.Policy != r.policy.Name || p.Engine != r.policy.Engine {
		return nil, fmt.Errorf("written by policy %q (%s), this recommender runs %q (%s)", p.Policy, p.Engine, r.policy.Name, r.policy.Engine)
	}
	if len(p.Containers) > MaxCheckpointContainers {
		return nil, fmt.Errorf("%d containers exceed the bound %d", len(p.Containers), MaxCheckpointContainers)
	}
	out := make(map[string]*container, len(p.Containers))
	for i := range p.Containers {
		cv := &p.Containers[i]
		if _, dup := out[cv.ID]; dup {
			return nil, fmt.Errorf("container %q appears twice", cv.ID)
		}
		c := newContainer(&r.policy)
		c.first, c.last, c.samples, c.spec = cv.First, cv.Last, cv.Samples, cv.Spec
		c.oomKills, c.oomLimit, c.lastOOMAt = cv.OOMKills, cv.OOMLimit, cv.LastOOMAt
		if c.samples < 0 || !validAmount(c.oomLimit) || !validAmount(c.spec.CPURequest) || !validAmount(c.spec.CPULimit) ||
			!validAmount(c.spec.MemoryRequest) || !validAmount(c.spec.MemoryLimit) {
			return nil, fmt.Errorf("container %q: negative or non-finite counters", cv.ID)
		}
		if c.vpa != nil {
			v := cv.VPA
			if v == nil || cv.CPU != nil || cv.Mem != nil {
				return nil, fmt.Errorf("container %q: want vpa state only", cv.ID)
			}
			if err := loadHist(c.vpa.cpu, v.CPU); err != nil {
				return nil, fmt.Errorf("container %q cpu: %w", cv.ID, err)
			}
			if err := loadHist(c.vpa.mem, v.Mem); err != nil {
				return nil, fmt.Errorf("container %q memory: %w", cv.ID, err)
			}
			if v.CPUSamples < 0 || v.MemPeak < 0 || v.OOMPeak < 0 {
				return nil, fmt.Errorf("container %q: negative vpa counters", cv.ID)
			}
			c.vpa.firstCPU, c.vpa.lastCPU, c.vpa.lastCPUSample, c.vpa.cpuSamples = v.FirstCPU, v.LastCPU, v.LastCPUSample, v.CPUSamples
			c.vpa.memPeak, c.vpa.oomPeak, c.vpa.windowEnd, c.vpa.lastMemSample = v.MemPeak, v.OOMPeak, v.WindowEnd, v.LastMemSample
		} else {
			if cv.VPA != nil || cv.CPU == nil || cv.Mem == nil {
				return nil, fmt.Errorf("container %q: want cpu and mem state only", cv.ID)
			}
			if err := loadResource(&c.cpu, cv.CPU); err != nil {
				return nil, fmt.Errorf("container %q cpu: %w", cv.ID, err)
			}
			if err := loadResource(&c.mem, cv.Mem); err != nil {
				return nil, fmt.Errorf("container %q memory: %w", cv.ID, err)
			}
		}
		out[cv.ID] = c
	}
	return out, nil
}

// loadHist decodes data into h, which must keep its policy-given options.
func loadHist(h *Histogram, data []byte) error {
	var d Histogram
	if err := d.UnmarshalBinary(data); err != nil {
		return err
	}
	if d.opts != h.opts {
		return fmt.Errorf("%w: histogram options %+v, policy wants %+v", ErrOptionsMismatch, d.opts, h.opts)
	}
	*h = d
	return nil
}

func loadResource(s *resourceState, v *resourceV1) error {
	if err := loadHist(s.hist, v.Hist); err != nil {
		return err
	}
	switch {
	case s.fast != nil:
		if err := loadHist(s.fast, v.Fast); err != nil {
			return fmt.Errorf("fast: %w", err)
		}
	case v.Fast != nil:
		return errors.New("fast histogram present but the policy has none")
	}
	if !validAmount(v.Peak) || !validAmount(v.Held) {
		return fmt.Errorf("peak %v or held target %v not finite and ≥ 0", v.Peak, v.Held)
	}
	s.peakEnd, s.peak, s.held = v.PeakEnd, v.Peak, v.Held
	return nil
}
