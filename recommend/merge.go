package recommend

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Counts is a sparse histogram of sample counts without decay, in the
// bucket layout of a Histogram: the delta one node reports for one
// workload-container and one window of time. Counts are integers, so
// adding the Counts of many nodes is exact in any order and grouping; that
// is what makes a merged recommendation equal to one built from a single
// histogram of all the samples (see AddCounts).
//
// It encodes as a Histogram with HalfLife 0 whose weights are the counts
// (MarshalBinary), so the wire form is the sparse histogram encoding. The
// zero value is not usable; call NewCounts. Not safe for concurrent use.
type Counts struct {
	opts HistogramOptions
	// bucket[i] holds n[i] samples; buckets ascend and n[i] > 0.
	bucket []uint16
	n      []uint64
	total  uint64
	layout *bucketLayout
}

// MaxCount bounds the samples a Counts holds in all, so that every sum of
// counts stays an exact float64 integer (2^53) with room to merge 2^13
// deltas of the largest size.
const MaxCount = 1 << 40

// NewCounts returns empty counts in o's bucket layout (o.HalfLife is
// ignored: counts do not decay).
func NewCounts(o HistogramOptions) (*Counts, error) {
	o.HalfLife = 0
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.NumBuckets > math.MaxUint16+1 {
		return nil, fmt.Errorf("%w: %d buckets", ErrInvalidOptions, o.NumBuckets)
	}
	return &Counts{opts: o, layout: cachedLayout(o)}, nil
}

// Options returns the layout (HalfLife 0).
func (c *Counts) Options() HistogramOptions { return c.opts }

// Total returns the number of samples.
func (c *Counts) Total() uint64 { return c.total }

// Len returns the number of non-empty buckets.
func (c *Counts) Len() int { return len(c.bucket) }

// Reset empties c, keeping its storage.
func (c *Counts) Reset() { c.bucket, c.n, c.total = c.bucket[:0], c.n[:0], 0 }

// Add counts one sample of value v; a negative, NaN or infinite v is
// ignored, as Histogram.AddSample ignores it.
func (c *Counts) Add(v float64) {
	if !(v >= 0) || math.IsInf(v, 0) {
		return
	}
	c.addN(c.find(v), 1)
}

func (c *Counts) find(v float64) int {
	if c.layout != nil {
		return c.layout.find(v)
	}
	return c.opts.FindBucket(v)
}

// addN adds n samples to bucket b; the caller keeps the total in bounds.
func (c *Counts) addN(b int, n uint64) {
	i, found := slices.BinarySearch(c.bucket, uint16(b))
	if found {
		c.n[i] += n
	} else {
		c.bucket = slices.Insert(c.bucket, i, uint16(b))
		c.n = slices.Insert(c.n, i, n)
	}
	c.total += n
}

// Merge adds o's counts to c. It fails, changing nothing, when the layouts
// differ or the total would pass MaxCount.
func (c *Counts) Merge(o *Counts) error {
	if c.opts != o.opts {
		return fmt.Errorf("%w: merging counts %+v into %+v", ErrOptionsMismatch, o.opts, c.opts)
	}
	if c.total+o.total > MaxCount {
		return fmt.Errorf("%w: %d + %d samples exceed %d", ErrInvalidSample, c.total, o.total, uint64(MaxCount))
	}
	for i, b := range o.bucket {
		c.addN(int(b), o.n[i])
	}
	return nil
}

// Clone returns an independent copy.
func (c *Counts) Clone() *Counts {
	d := *c
	d.bucket, d.n = slices.Clone(c.bucket), slices.Clone(c.n)
	return &d
}

// Equal reports whether both hold the same counts in the same layout.
func (c *Counts) Equal(o *Counts) bool {
	return c.opts == o.opts && c.total == o.total && slices.Equal(c.bucket, o.bucket) && slices.Equal(c.n, o.n)
}

// Each calls fn for every non-empty bucket in ascending order with the
// bucket's lower bound and its count.
func (c *Counts) Each(fn func(bucket int, start float64, n uint64)) {
	for i, b := range c.bucket {
		fn(int(b), c.opts.BucketStart(int(b)), c.n[i])
	}
}

// MarshalBinary encodes c as a Histogram with HalfLife 0 (the sparse
// histogram encoding, version 1) whose weights are the counts.
func (c *Counts) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil), nil }

// AppendBinary appends the encoding of MarshalBinary to buf.
func (c *Counts) AppendBinary(buf []byte) []byte {
	lo, hi := c.opts.NumBuckets-1, 0
	if len(c.bucket) > 0 {
		lo, hi = int(c.bucket[0]), int(c.bucket[len(c.bucket)-1])
	}
	buf = append(buf, histogramEncodingV1)
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(c.opts.FirstBucketSize))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(c.opts.Ratio))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(c.opts.Epsilon))
	buf = binary.AppendUvarint(buf, uint64(c.opts.NumBuckets))
	buf = binary.AppendVarint(buf, 0)                  // HalfLife
	buf = binary.AppendVarint(buf, time.Time{}.Unix()) // reference: the zero time
	buf = binary.AppendUvarint(buf, 0)
	buf = binary.AppendUvarint(buf, uint64(lo))
	buf = binary.AppendUvarint(buf, uint64(hi))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(float64(c.total)))
	buf = binary.AppendUvarint(buf, uint64(len(c.bucket)))
	prev := -1
	for i, b := range c.bucket {
		buf = binary.AppendUvarint(buf, uint64(int(b)-prev))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(float64(c.n[i])))
		prev = int(b)
	}
	return buf
}

// UnmarshalBinary replaces c with decoded counts: a histogram encoding with
// HalfLife 0 whose weights are whole numbers summing to its total, at most
// MaxCount. When c was made by NewCounts, the layout must be c's. On error
// c is unchanged and the error wraps ErrCorruptHistogram (or
// ErrOptionsMismatch for a foreign layout).
func (c *Counts) UnmarshalBinary(data []byte) error {
	// The sparse form is read as it is, with the checks of a Histogram's
	// decoding, without a dense weight array (the aggregator decodes two
	// per container and report).
	d := decoder{buf: data}
	if v := d.byte(); d.err == nil && v != histogramEncodingV1 {
		d.fail("encoding version %d, want %d", v, histogramEncodingV1)
	}
	var o HistogramOptions
	o.FirstBucketSize, o.Ratio, o.Epsilon = d.float(), d.float(), d.float()
	nb, hl := d.uvarint(), d.varint()
	d.varint() // reference time: counts do not decay
	nsec := d.uvarint()
	lo, hi := d.uvarint(), d.uvarint()
	total := d.float()
	count := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if nb > maxHistogramBuckets {
		return fmt.Errorf("%w: %d buckets", ErrCorruptHistogram, nb)
	}
	o.NumBuckets, o.HalfLife = int(nb), time.Duration(hl)
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptHistogram, err)
	}
	if nsec >= 1e9 || lo >= nb || hi >= nb || count > nb {
		return fmt.Errorf("%w: nanoseconds %d, bounds %d..%d or %d buckets out of range for %d buckets", ErrCorruptHistogram, nsec, lo, hi, count, nb)
	}
	if o.HalfLife != 0 {
		return fmt.Errorf("%w: counts with half-life %v, want 0", ErrCorruptHistogram, o.HalfLife)
	}
	if c.opts != (HistogramOptions{}) && o != c.opts {
		return fmt.Errorf("%w: counts in layout %+v, want %+v", ErrOptionsMismatch, o, c.opts)
	}
	out := Counts{opts: o, layout: knownLayout(o), bucket: make([]uint16, 0, count), n: make([]uint64, 0, count)}
	var sum uint64
	prev := -1
	for range count {
		gap, w := d.uvarint(), d.float()
		if d.err != nil {
			return d.err
		}
		if gap == 0 || gap > nb || prev+int(gap) >= int(nb) {
			return fmt.Errorf("%w: bucket index gap %d after %d", ErrCorruptHistogram, gap, prev)
		}
		prev += int(gap)
		if !(w > 0) || w != math.Trunc(w) || w > MaxCount {
			return fmt.Errorf("%w: bucket %d count %v is not a whole number in 1..%d", ErrCorruptHistogram, prev, w, uint64(MaxCount))
		}
		out.bucket = append(out.bucket, uint16(prev))
		out.n = append(out.n, uint64(w))
		sum += uint64(w)
	}
	if len(d.buf) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptHistogram, len(d.buf))
	}
	if sum > MaxCount || !(total >= 0) || float64(sum) != total {
		return fmt.Errorf("%w: counts sum to %d, total says %v", ErrCorruptHistogram, sum, total)
	}
	out.total = sum
	*c = out
	return nil
}

// ErrNotMergeable: counts that a policy cannot take (see AddCounts).
var ErrNotMergeable = fmt.Errorf("%w: policy does not merge counts", ErrInvalidPolicy)

// Mergeable reports whether the policy's state can be built from Counts:
// the cgpilot engine with no peak aggregation (every preset but vpa). The
// vpa engine drops a CPU sample not later than the container's previous
// one and keeps memory as daily peaks per container, neither of which a
// count of samples carries.
func (p *Policy) Mergeable() error {
	switch {
	case p.Engine != EngineCgpilot:
		return fmt.Errorf("%w: %s: engine %s", ErrNotMergeable, p.Name, p.Engine)
	case p.CPU.PeakInterval > 0 || p.Memory.PeakInterval > 0:
		return fmt.Errorf("%w: %s: peak intervals", ErrNotMergeable, p.Name)
	}
	return nil
}

// AddCounts records into container id the samples counted in cpu and mem,
// all taken at t (the end of the window they were counted in): bucket b
// gains count × 2^((t − ref)/half-life), one multiplication per bucket. mem
// may hold fewer samples than cpu (a sample without memory), never more;
// either may be nil. The counts must be in the layouts of the policy's
// histograms. t may be earlier than samples recorded before (a late
// window): its weight is still its own.
//
// Exactness: the state after a sequence of AddCounts calls depends only on
// the sequence of (t, counts) pairs. Counts from many nodes for one window
// summed first (Counts.Merge, exact integer sums) and added once therefore
// give bit for bit the state a single recorder of all those samples
// would reach by counting them per window, whatever the split of samples
// across nodes and the order their reports arrived in.
//
// The violation trackers count a bucket's samples as above the target in
// force when the bucket's lower bound is (a count carries no exact value).
// Errors wrap ErrNotMergeable, ErrOptionsMismatch or ErrInvalidSample, and
// change nothing.
func (r *Recommender) AddCounts(id string, t time.Time, cpu, mem *Counts) error {
	if err := r.policy.Mergeable(); err != nil {
		return err
	}
	for _, x := range []struct {
		c    *Counts
		want HistogramOptions
	}{{cpu, CPUHistogramOptions()}, {mem, MemoryHistogramOptions()}} {
		x.want.HalfLife = 0
		if x.c != nil && x.c.opts != x.want {
			return fmt.Errorf("%w: counts of %q in layout %+v, want %+v", ErrOptionsMismatch, id, x.c.opts, x.want)
		}
	}
	var n, nm uint64
	if cpu != nil {
		n = cpu.total
	}
	if mem != nil {
		nm = mem.total
	}
	if nm > n {
		return fmt.Errorf("%w: %q: %d memory samples but %d CPU samples", ErrInvalidSample, id, nm, n)
	}
	if n == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.get(id)
	if c.samples == 0 || t.Before(c.first) {
		c.first = t
	}
	if c.samples == 0 || t.After(c.last) {
		c.last = t
	}
	c.samples += int64(n)
	c.cpu.addCounts(cpu, t)
	c.cpuT.observeCounts(cpu)
	if mem != nil {
		c.mem.addCounts(mem, t)
		c.memT.observeCounts(mem)
	}
	return nil
}

func (s *resourceState) addCounts(c *Counts, t time.Time) {
	for _, h := range []*Histogram{s.hist, s.fast} {
		if h == nil {
			continue
		}
		f := h.decayFactor(t)
		for i, b := range c.bucket {
			h.addRaw(int(b), float64(c.n[i])*f)
		}
	}
}

func (t *tracker) observeCounts(c *Counts) {
	if t.inForce <= 0 {
		return
	}
	for i, b := range c.bucket {
		t.n += float64(c.n[i])
		if c.opts.BucketStart(int(b)) > t.inForce {
			t.viol += float64(c.n[i])
		}
	}
}

// EncodeContainer returns container id's state as a checkpoint holding
// only that container (the format of EncodeCheckpoint, so the same checks
// apply when it is read back); false when there is no such container.
func (r *Recommender) EncodeContainer(id string, now time.Time) ([]byte, bool) {
	r.mu.Lock()
	c, ok := r.containers[id]
	if !ok {
		r.mu.Unlock()
		return nil, false
	}
	payload := binary.LittleEndian.AppendUint32(make([]byte, 0, 1024), CheckpointVersion)
	payload = appendString(payload, r.policy.Name)
	payload = appendString(payload, string(r.policy.Engine))
	payload = appendTime(payload, now)
	payload = binary.AppendUvarint(payload, 1)
	payload = c.appendState(payload, id)
	// The format's fleet controllers follow; DecodeContainer ignores them
	// (they are the node's, not the container's).
	payload = r.appendFleets(payload)
	r.mu.Unlock()
	return sealCheckpoint(payload), true
}

// DecodeContainer sets the state of the one container in data (written by
// EncodeContainer under the same policy) and returns its id, all or
// nothing: errors are those of DecodeCheckpoint, and a checkpoint holding
// other than one container is corrupt. Other containers are untouched.
func (r *Recommender) DecodeContainer(name string, data []byte) (string, error) {
	payload, version, err := openCheckpoint(name, data)
	if err != nil {
		return "", err
	}
	containers, _, err := r.decodePayload(version, payload)
	if err == nil && len(containers) != 1 {
		err = fmt.Errorf("%d containers, want 1", len(containers))
	}
	if err != nil {
		return "", &CorruptCheckpointError{Path: name, Reason: err.Error(), Kind: ErrCheckpoint}
	}
	var id string
	var c *container
	for k, v := range containers {
		id, c = k, v
	}
	r.mu.Lock()
	if old, ok := r.containers[id]; ok {
		old.detached = true
	}
	r.containers[id] = c
	r.mu.Unlock()
	return id, nil
}

// Has reports whether container id has state.
func (r *Recommender) Has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.containers[id]
	return ok
}
