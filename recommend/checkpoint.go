package recommend

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

// A checkpoint keeps only what cannot be recomputed: the histograms and the
// little per-container state around them. The file is binary, for speed (a
// checkpoint of 10,000 histograms is encoded and decoded in a few ms):
//
//	8 bytes   magic "cgpRCKPT"
//	uint32    format version (little-endian)
//	32 bytes  SHA-256 of the payload bytes as stored
//	payload   to the end of the file: the version again, the policy name and
//	          engine, the save time, then every container (see encodePayload)
//
// The checksum covers the exact stored bytes, not a printed Go value, and
// the repeated version makes an edit of the header alone fail.
const (
	// CheckpointVersion is the version SaveCheckpoint writes. Version 2
	// adds each container's violation trackers (see tracker); version 3
	// their counts since the fleet controllers' last tick and, after the
	// containers, the controllers themselves (fleetState); version 4 each
	// resource's resize budget and time-of-day state (appendSeason), so
	// that a restart does not cost a cyclic container the days it takes
	// to find its cycle again. Older files still load: version 1 trackers
	// start empty (migrateV1), version 2 fleets start unsolved and
	// uncalibrated (migrateV2), version 3 seasons start empty.
	CheckpointVersion = 4
	// MaxCheckpointBytes bounds what LoadCheckpoint reads.
	MaxCheckpointBytes = 256 << 20
	// MaxCheckpointContainers bounds the containers of one checkpoint.
	MaxCheckpointContainers = 1 << 20
	// maxOOMKills bounds the kill times kept per container.
	maxOOMKills = 1 << 16
)

var checkpointMagic = [8]byte{'c', 'g', 'p', 'R', 'C', 'K', 'P', 'T'}

const checkpointHeader = 8 + 4 + 32

// CorruptCheckpointError is a checkpoint whose bytes do not verify (Want
// and Got, the stored and computed checksums) or decode (Reason): the one
// corrupt-file error of cgpilot's checkpoints, atomicfile.CorruptError,
// with Kind ErrCheckpoint (so errors.Is(err, ErrCheckpoint) holds).
type CorruptCheckpointError = atomicfile.CorruptError

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

// EncodeCheckpoint returns the checkpoint bytes of the current state.
func (r *Recommender) EncodeCheckpoint(now time.Time) ([]byte, error) {
	r.mu.Lock()
	payload := r.encodePayload(make([]byte, 0, 64+len(r.containers)*800), now)
	r.mu.Unlock()
	return sealCheckpoint(payload), nil
}

// sealCheckpoint prepends the header (magic, version, checksum) to payload.
func sealCheckpoint(payload []byte) []byte {
	out := make([]byte, 0, checkpointHeader+len(payload))
	out = append(out, checkpointMagic[:]...)
	out = binary.LittleEndian.AppendUint32(out, CheckpointVersion)
	sum := sha256.Sum256(payload)
	out = append(out, sum[:]...)
	return append(out, payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

func appendFloat(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

// encodePayload appends, in order: version, policy, engine, save time,
// container count, and per container its id, first/last sample times,
// sample count, requests/limits, OOM kills, OOM limit and time, then either
// (kind 0, cgpilot) per resource the histogram, an optional fast histogram,
// the peak interval end, peak and target in force, or (kind 1, vpa) both
// histograms and VPA's sample bookkeeping; then (version 3) both fleet
// controllers.
func (r *Recommender) encodePayload(b []byte, now time.Time) []byte {
	b = binary.LittleEndian.AppendUint32(b, CheckpointVersion)
	b = appendString(b, r.policy.Name)
	b = appendString(b, string(r.policy.Engine))
	b = appendTime(b, now)
	b = binary.AppendUvarint(b, uint64(len(r.containers)))
	for id, c := range r.containers {
		b = c.appendState(b, id)
	}
	return r.appendFleets(b)
}

// appendFleets appends (version 3) both fleet controllers. r.mu held.
func (r *Recommender) appendFleets(b []byte) []byte {
	for i := range r.fleet {
		f := &r.fleet[i]
		for _, v := range []float64{f.lambda, f.cv, f.cp, f.pred, f.viol, f.n} {
			b = appendFloat(b, v)
		}
		b = appendTime(b, f.last)
	}
	return b
}

// fleet decodes (version 3) one fleet controller.
func (d *decoder) fleet(f *fleetState) {
	f.lambda, f.cv, f.cp, f.pred, f.viol, f.n = d.float(), d.float(), d.float(), d.float(), d.float(), d.float()
	f.last = d.time()
	if d.err == nil && (!validAmount(f.lambda) || !validAmount(f.cv) || !validAmount(f.cp) || !(f.pred >= 0 && f.pred <= 1) ||
		!validAmount(f.viol) || !validAmount(f.n) || f.viol > f.n) {
		d.fail("fleet controller out of range: λ %v, calibration %v/%v, predicted %v, rate %v/%v", f.lambda, f.cv, f.cp, f.pred, f.viol, f.n)
	}
}

// appendState appends one container's checkpoint record.
func (c *container) appendState(b []byte, id string) []byte {
	b = appendString(b, id)
	b = appendTime(b, c.first)
	b = appendTime(b, c.last)
	b = binary.AppendVarint(b, c.samples)
	for _, v := range []float64{c.spec.CPURequest, c.spec.CPULimit, c.spec.MemoryRequest, c.spec.MemoryLimit} {
		b = appendFloat(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(c.oomKills)))
	for _, k := range c.oomKills {
		b = appendTime(b, k)
	}
	b = appendFloat(b, c.oomLimit)
	b = appendTime(b, c.lastOOMAt)
	if v := c.vpa; v != nil {
		b = append(b, 1)
		b = v.cpu.appendBinary(b)
		b = v.mem.appendBinary(b)
		for _, t := range []time.Time{v.firstCPU, v.lastCPU, v.lastCPUSample} {
			b = appendTime(b, t)
		}
		for _, n := range []int64{v.cpuSamples, v.memPeak, v.oomPeak} {
			b = binary.AppendVarint(b, n)
		}
		b = appendTime(b, v.windowEnd)
		b = appendTime(b, v.lastMemSample)
		return c.appendTrackers(b)
	}
	b = append(b, 0)
	for _, s := range []*resourceState{&c.cpu, &c.mem} {
		b = s.hist.appendBinary(b)
		if s.fast != nil {
			b = append(b, 1)
			b = s.fast.appendBinary(b)
		} else {
			b = append(b, 0)
		}
		b = appendTime(b, s.peakEnd)
		b = appendFloat(b, s.peak)
		b = appendFloat(b, s.held)
		b = s.appendSeason(b)
	}
	return c.appendTrackers(b)
}

// appendSeason appends (version 4) the resize budget, a flag (whether the
// policy keeps a time-of-day state), then the filled hourly slots (their
// count, then hour, sum and count each) and the period histograms. The
// cycle's detection is not kept: it is made again within the hour.
func (s *resourceState) appendSeason(b []byte) []byte {
	b = appendFloat(b, s.budget)
	se := s.season
	if se == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	filled := 0
	for _, h := range se.hour {
		if h != math.MinInt64 {
			filled++
		}
	}
	b = binary.AppendUvarint(b, uint64(filled))
	for i, h := range se.hour {
		if h != math.MinInt64 {
			b = binary.AppendVarint(b, h)
			b = appendFloat(b, se.sum[i])
			b = appendFloat(b, se.n[i])
		}
	}
	b = binary.AppendUvarint(b, uint64(len(se.periods)))
	for _, h := range se.periods {
		b = h.appendBinary(b)
	}
	return b
}

// season decodes (version 4) what appendSeason wrote into s, whose season
// (when the policy keeps one) is fresh.
func (d *decoder) season(s *resourceState) {
	s.budget = d.float()
	flag := d.byte()
	if d.err != nil {
		return
	}
	if !validAmount(s.budget) {
		d.fail("resize budget %v not finite and ≥ 0", s.budget)
		return
	}
	se := s.season
	switch {
	case flag == 0 && se == nil:
		return
	case flag == 1 && se != nil:
	default:
		d.fail("time-of-day flag %d does not match the policy", flag)
		return
	}
	filled := d.uvarint()
	if d.err == nil && filled > seasonHours {
		d.fail("%d hourly slots, at most %d", filled, seasonHours)
	}
	for range filled {
		h, sum, n := d.varint(), d.float(), d.float()
		if d.err != nil {
			return
		}
		slot := int((h%seasonHours + seasonHours) % seasonHours)
		if h == math.MinInt64 || se.hour[slot] != math.MinInt64 || !validAmount(sum) || !validAmount(n) {
			d.fail("hourly slot of hour %d (sum %v, count %v) invalid or repeated", h, sum, n)
			return
		}
		se.hour[slot], se.sum[slot], se.n[slot] = h, sum, n
	}
	if periods := d.uvarint(); d.err == nil && periods != uint64(len(se.periods)) {
		d.fail("%d period histograms, the policy keeps %d", periods, len(se.periods))
		return
	}
	for i := range se.periods {
		se.periods[i] = d.hist(se.periods[i])
	}
}

// appendTrackers appends (version 2) both trackers: target in force,
// decayed violation and sample counts, last decay time, ε and margin, and
// (version 3) the counts since the fleet's last tick.
func (c *container) appendTrackers(b []byte) []byte {
	for _, t := range []*tracker{&c.cpuT, &c.memT} {
		for _, v := range []float64{t.inForce, t.viol, t.n} {
			b = appendFloat(b, v)
		}
		b = appendTime(b, t.last)
		b = appendFloat(b, t.eps)
		b = appendFloat(b, t.margin)
		b = appendFloat(b, t.tickViol)
		b = appendFloat(b, t.tickN)
	}
	return b
}

func (d *decoder) trackers(c *container, version uint32) {
	for _, t := range []*tracker{&c.cpuT, &c.memT} {
		t.inForce, t.viol, t.n = d.float(), d.float(), d.float()
		t.last = d.time()
		t.eps, t.margin = d.float(), d.float()
		if version >= 3 {
			t.tickViol, t.tickN = d.float(), d.float()
		}
		if d.err == nil && (!validAmount(t.inForce) || !validAmount(t.viol) || !validAmount(t.n) || t.viol > t.n ||
			!(t.eps >= 0 && t.eps <= 0.5) || !(t.margin >= 0 && t.margin <= maxObjectiveMargin) ||
			!validAmount(t.tickViol) || !validAmount(t.tickN) || t.tickViol > t.tickN) {
			d.fail("violation tracker out of range: %+v", *t)
		}
	}
}

// SaveCheckpoint writes the state to path atomically and durably through
// internal/atomicfile: a crash leaves either the old or the new file.
func (r *Recommender) SaveCheckpoint(path string, now time.Time) error {
	data, err := r.EncodeCheckpoint(now)
	if err != nil {
		return err
	}
	if len(data) > MaxCheckpointBytes {
		return fmt.Errorf("%w: %s: %d bytes exceed the %d-byte bound", ErrCheckpoint, path, len(data), MaxCheckpointBytes)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return nil
}

// LoadCheckpoint replaces the state with the checkpoint at path, all or
// nothing. A missing file returns an error wrapping fs.ErrNotExist. A
// corrupt, oversized or foreign-policy file returns a
// *CorruptCheckpointError (wrapping ErrCheckpoint), is moved aside with
// atomicfile.Quarantine so that the next save does not lose the evidence,
// and leaves the state untouched (fresh at startup). A file of a newer
// format returns a *VersionError and is left in place: a downgraded agent
// must not destroy its successor's state.
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
	if errors.As(err, &ce) || (errors.As(err, &ve) && ve.Version < 1) {
		if _, qerr := atomicfile.Quarantine(path, time.Now()); qerr != nil {
			return fmt.Errorf("%w (and moving it aside failed: %w)", err, qerr)
		}
	}
	return err
}

// DecodeCheckpoint replaces the state with the checkpoint in data, all or
// nothing; name labels errors.
func (r *Recommender) DecodeCheckpoint(name string, data []byte) error {
	payload, version, err := openCheckpoint(name, data)
	if err != nil {
		return err
	}
	// Versions 1, 2 and 3 share the layout up to the trackers that version
	// 2 appends per container, the tick counts and fleets of version 3;
	// migrateV1 and migrateV2 are the explicit conversions.
	containers, fleet, err := r.decodePayload(version, payload)
	if err != nil {
		return &CorruptCheckpointError{Path: name, Reason: err.Error(), Kind: ErrCheckpoint}
	}
	r.mu.Lock()
	for _, c := range r.containers {
		c.detached = true
	}
	r.containers = containers
	for i := range r.fleet {
		f := &r.fleet[i]
		f.lambda, f.cv, f.cp, f.pred, f.viol, f.n, f.last = fleet[i].lambda, fleet[i].cv, fleet[i].cp, fleet[i].pred, fleet[i].viol, fleet[i].n, fleet[i].last
	}
	r.mu.Unlock()
	return nil
}

// openCheckpoint checks the header and checksum of data and returns the
// payload and its format version.
func openCheckpoint(name string, data []byte) ([]byte, uint32, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptCheckpointError{Path: name, Reason: fmt.Sprintf(format, args...), Kind: ErrCheckpoint}
	}
	if len(data) > MaxCheckpointBytes {
		return nil, 0, corrupt("more than %d bytes", MaxCheckpointBytes)
	}
	if len(data) < checkpointHeader || !bytes.Equal(data[:8], checkpointMagic[:]) {
		return nil, 0, corrupt("not a cgpilot recommend checkpoint (%d bytes, bad magic or short header)", len(data))
	}
	v := binary.LittleEndian.Uint32(data[8:12])
	if v < 1 || v > CheckpointVersion {
		return nil, 0, &VersionError{Path: name, Version: int(v), Supported: CheckpointVersion}
	}
	payload := data[checkpointHeader:]
	sum := sha256.Sum256(payload)
	if !bytes.Equal(sum[:], data[12:44]) {
		return nil, 0, &CorruptCheckpointError{Path: name, Want: "sha256:" + hex.EncodeToString(data[12:44]), Got: "sha256:" + hex.EncodeToString(sum[:]), Kind: ErrCheckpoint}
	}
	return payload, v, nil
}

func (d *decoder) string(limit int) string {
	n := d.uvarint()
	if d.err == nil && (n > uint64(limit) || n > uint64(len(d.buf))) {
		d.fail("string of %d bytes", n)
	}
	if d.err != nil {
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) time() time.Time {
	sec, nsec := d.varint(), d.uvarint()
	if d.err == nil && nsec >= 1e9 {
		d.fail("nanoseconds %d", nsec)
	}
	if d.err != nil || (sec == zeroUnix && nsec == 0) {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec))
}

var zeroUnix = time.Time{}.Unix()

// hist decodes a histogram that must have the options of fresh, the
// policy's empty histogram.
func (d *decoder) hist(fresh *Histogram) *Histogram {
	if d.err != nil {
		return nil
	}
	want := fresh.opts
	h, err := d.histogram()
	if err != nil {
		d.err = err
		return nil
	}
	if h.opts != want {
		d.err = fmt.Errorf("%w: histogram options %+v, policy wants %+v", ErrOptionsMismatch, h.opts, want)
		return nil
	}
	h.memo = fresh.memo
	return h
}

// migrateV1 brings a container decoded from a version 1 checkpoint to
// version 2: its violation trackers start empty, so the realised rates
// restart from the next samples and ε from the objective; the target in
// force is the one the v1 state held.
func migrateV1(c *container) {
	c.cpuT, c.memT = tracker{inForce: c.cpu.held}, tracker{inForce: c.mem.held}
}

// migrateV2 brings the fleet controllers of a version 1 or 2 checkpoint to
// version 3: they start unsolved and uncalibrated (λ is solved again at the
// next step from the restored histograms; κ starts at 1), and the
// containers' counts since the last tick start at zero.
func migrateV2() [2]fleetState { return [2]fleetState{} }

func (r *Recommender) decodePayload(header uint32, raw []byte) (map[string]*container, [2]fleetState, error) {
	var fleet [2]fleetState
	d := &decoder{buf: raw, kind: ErrCheckpoint}
	if len(raw) < 4 {
		return nil, fleet, errors.New("payload truncated")
	}
	version := binary.LittleEndian.Uint32(raw)
	d.buf = raw[4:]
	policy, engine := d.string(1<<10), d.string(64)
	d.time()
	count := d.uvarint()
	if d.err != nil {
		return nil, fleet, d.err
	}
	if version != header {
		return nil, fleet, fmt.Errorf("payload version %d inside a version %d header", version, header)
	}
	if policy != r.policy.Name || Engine(engine) != r.policy.Engine {
		return nil, fleet, fmt.Errorf("written by policy %q (%s), this recommender runs %q (%s)", policy, engine, r.policy.Name, r.policy.Engine)
	}
	if count > MaxCheckpointContainers {
		return nil, fleet, fmt.Errorf("%d containers exceed the bound %d", count, MaxCheckpointContainers)
	}
	out := make(map[string]*container, min(count, uint64(len(raw)/16)))
	for range count {
		id := d.string(1 << 12)
		c := newContainer(&r.policy, r.decay)
		c.first, c.last, c.samples = d.time(), d.time(), d.varint()
		c.spec = Resources{CPURequest: d.float(), CPULimit: d.float(), MemoryRequest: d.float(), MemoryLimit: d.float()}
		kills := d.uvarint()
		if d.err == nil && kills > maxOOMKills {
			d.fail("%d OOM kills", kills)
		}
		for i := uint64(0); i < kills && d.err == nil; i++ {
			c.oomKills = append(c.oomKills, d.time())
		}
		c.oomLimit, c.lastOOMAt = d.float(), d.time()
		kind := d.byte()
		if d.err != nil {
			return nil, fleet, fmt.Errorf("container %q: %w", id, d.err)
		}
		if _, dup := out[id]; dup {
			return nil, fleet, fmt.Errorf("container %q appears twice", id)
		}
		if c.samples < 0 || !validAmount(c.oomLimit) || !validAmount(c.spec.CPURequest) || !validAmount(c.spec.CPULimit) ||
			!validAmount(c.spec.MemoryRequest) || !validAmount(c.spec.MemoryLimit) {
			return nil, fleet, fmt.Errorf("container %q: negative or non-finite counters", id)
		}
		switch {
		case kind == 1 && c.vpa != nil:
			v := c.vpa
			v.cpu, v.mem = d.hist(v.cpu), d.hist(v.mem)
			v.firstCPU, v.lastCPU, v.lastCPUSample = d.time(), d.time(), d.time()
			v.cpuSamples, v.memPeak, v.oomPeak = d.varint(), d.varint(), d.varint()
			v.windowEnd, v.lastMemSample = d.time(), d.time()
			if d.err == nil && (v.cpuSamples < 0 || v.memPeak < 0 || v.oomPeak < 0) {
				d.fail("negative vpa counters")
			}
		case kind == 0 && c.vpa == nil:
			for _, s := range []*resourceState{&c.cpu, &c.mem} {
				s.hist = d.hist(s.hist)
				switch hasFast := d.byte(); {
				case hasFast == 1 && s.fast != nil:
					s.fast = d.hist(s.fast)
				case hasFast == 0 && s.fast == nil:
				default:
					d.fail("fast histogram flag %d does not match the policy", hasFast)
				}
				s.peakEnd, s.peak, s.held = d.time(), d.float(), d.float()
				if d.err == nil && (!validAmount(s.peak) || !validAmount(s.held)) {
					d.fail("peak %v or target in force %v not finite and ≥ 0", s.peak, s.held)
				}
				if version >= 4 {
					d.season(s)
				}
			}
		default:
			d.fail("state kind %d does not match engine %s", kind, r.policy.Engine)
		}
		if version >= 2 {
			d.trackers(c, version)
		} else {
			migrateV1(c)
		}
		if d.err != nil {
			return nil, fleet, fmt.Errorf("container %q: %w", id, d.err)
		}
		out[id] = c
	}
	if version >= 3 {
		for i := range fleet {
			d.fleet(&fleet[i])
		}
		if d.err != nil {
			return nil, fleet, fmt.Errorf("fleet: %w", d.err)
		}
	} else {
		fleet = migrateV2()
	}
	if len(d.buf) != 0 {
		return nil, fleet, fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	return out, fleet, nil
}
