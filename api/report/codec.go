package report

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

// Sentinel errors of decoding and validation; every error wraps one of
// them and names the field and value.
var (
	// ErrMalformed: a report that does not parse or breaks a rule below.
	ErrMalformed = errors.New("report: malformed")
	// ErrOversized: a body or a list past its bound.
	ErrOversized = errors.New("report: oversized")
)

// Bounds of one report. A node runs at most a few hundred pods; these
// leave room for coalesced reports and many containers per pod while
// bounding what one request can make the aggregator allocate.
const (
	// MaxWireBytes bounds a request body as sent (gzip or not) and
	// MaxBodyBytes the JSON after decompression.
	MaxWireBytes = 4 << 20
	MaxBodyBytes = 16 << 20
	// MaxContainers, MaxOOMKills and MaxAdjustments bound the lists.
	MaxContainers  = 4096
	MaxOOMKills    = 1024
	MaxAdjustments = 4096
	// MaxWindows bounds how many windows one coalesced report may cover
	// (a week of one-minute windows).
	MaxWindows = 7 * 24 * 60
	// MaxPeriodSeconds bounds the report period.
	MaxPeriodSeconds = 3600
	// maxError bounds an adjustment's error text (the builder truncates).
	maxError = 1024
)

// Encode returns r as JSON (gzip-compressed when compress is true).
//
// The containers are encoded one at a time into the output (through the
// gzip writer when compressing), not as one json.Marshal of the whole
// report: that built the body in a buffer grown by doubling and then
// copied it, 4.4 times the body's size in allocations (2.7 MB for
// 1,000 containers, every window; TestEncodeAsMarshal), which set the agent's heap
// goal when a collection came during a send. The object's members are
// those of json.Marshal(r), containers last.
func Encode(r *Report, compress bool) ([]byte, error) {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if compress {
		zw, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		w = zw
	}
	if err := writeReport(w, &buf, r); err != nil {
		return nil, fmt.Errorf("report: encode: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("report: gzip: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// reportHead is a Report without its containers: the outer field hides
// the embedded one, and is left empty.
type reportHead struct {
	*Report
	Containers json.RawMessage `json:"containers,omitempty"`
}

// writeReport writes r's JSON to w; buf, when w writes into it
// uncompressed, is grown once to the body's size as estimated from the
// first container's.
func writeReport(w io.Writer, buf *bytes.Buffer, r *Report) error {
	head, err := json.Marshal(reportHead{Report: r})
	if err != nil {
		return err
	}
	head = bytes.TrimSuffix(head, []byte("}"))
	if len(head) > 1 {
		head = append(head, ',')
	}
	if r.Containers == nil {
		_, err := fmt.Fprintf(w, `%s"containers":null}`, head)
		return err
	}
	if _, err := fmt.Fprintf(w, `%s"containers":[`, head); err != nil {
		return err
	}
	enc := json.NewEncoder(w) // one pooled encode buffer for every container
	for i := range r.Containers {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		before := buf.Len()
		if err := enc.Encode(&r.Containers[i]); err != nil {
			return err
		}
		if i == 0 && w == io.Writer(buf) {
			buf.Grow((buf.Len() - before + 1) * (len(r.Containers) - 1) * 9 / 8)
		}
	}
	_, err = io.WriteString(w, "]}")
	return err
}

// Decoded is a validated report with its containers' counts decoded
// (index-aligned with Report.Containers).
type Decoded struct {
	Report
	Counts []ContainerCounts
}

// ContainerCounts are one container's decoded samples; Memory may be
// empty when memory was not sampled.
type ContainerCounts struct {
	CPU, Memory *recommend.Counts
}

// Decode reads one report from body, gzip-compressed when encoding is
// "gzip" (otherwise it must be empty or "identity"), and validates it.
// It reads at most MaxWireBytes from body and MaxBodyBytes of JSON;
// errors wrap ErrOversized or ErrMalformed. Unknown JSON fields are
// ignored (additions within a version are allowed; changes bump
// APIVersion).
func Decode(body io.Reader, encoding string) (*Decoded, error) {
	return DecodeRead(body, encoding, nil)
}

// DecodeRead is Decode that calls read (when not nil) once the body has
// been read in full, before it is parsed: a server times its own work
// apart from the client's sending.
func DecodeRead(body io.Reader, encoding string, read func()) (*Decoded, error) {
	wire := &limitedReader{r: body, left: MaxWireBytes}
	var src io.Reader = wire
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(wire)
		if err != nil {
			if wire.over {
				return nil, fmt.Errorf("%w: body over %d bytes", ErrOversized, MaxWireBytes)
			}
			return nil, fmt.Errorf("%w: gzip: %v", ErrMalformed, err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, fmt.Errorf("%w: content encoding %q (gzip or none)", ErrMalformed, encoding)
	}
	plain := &limitedReader{r: src, left: MaxBodyBytes}
	// The body is read into a pooled buffer and unmarshalled in one go: a
	// json.Decoder would grow a buffer of its own for every report.
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			buf.Reset()
			bodies.Put(buf)
		}
	}()
	buf.Reset()
	_, err := buf.ReadFrom(plain)
	if read != nil {
		read()
	}
	var d Decoded
	if err == nil && !wire.over && !plain.over {
		err = json.Unmarshal(buf.Bytes(), &d.Report)
	}
	switch {
	case wire.over:
		return nil, fmt.Errorf("%w: body over %d bytes", ErrOversized, MaxWireBytes)
	case plain.over:
		return nil, fmt.Errorf("%w: JSON over %d bytes", ErrOversized, MaxBodyBytes)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	counts, err := Validate(&d.Report)
	if err != nil {
		return nil, err
	}
	d.Counts = counts
	return &d, nil
}

// bodies pools the buffers reports are read into (most are under 256 KiB;
// a larger one is dropped after use rather than kept).
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// limitedReader reads at most left bytes and remembers that there was more.
type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.over = true
			return 0, errors.New("body too large")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// Validate checks every field of r against the rules in the field docs
// and the bounds above, and returns the decoded counts of its containers.
func Validate(r *Report) ([]ContainerCounts, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
	if r.APIVersion != APIVersion {
		return nil, bad("apiVersion %q, want %q", r.APIVersion, APIVersion)
	}
	if err := checkName("node", r.Node, 253, dnsSubdomain); err != nil {
		return nil, err
	}
	if err := checkName("agent.id", r.Agent.ID, 64, token); err != nil {
		return nil, err
	}
	switch {
	case r.Agent.Started.IsZero():
		return nil, bad("agent.started missing")
	case r.Sequence == 0:
		return nil, bad("sequence 0 (sequences start at 1)")
	case r.PeriodSeconds < 1 || r.PeriodSeconds > MaxPeriodSeconds:
		return nil, bad("periodSeconds %d, want 1..%d", r.PeriodSeconds, MaxPeriodSeconds)
	case r.Windows < 1 || r.Windows > MaxWindows:
		return nil, bad("windows %d, want 1..%d", r.Windows, MaxWindows)
	case r.WindowEnd.IsZero() || r.WindowEnd.UnixNano()%int64(time.Duration(r.PeriodSeconds)*time.Second) != 0:
		return nil, bad("windowEnd %s is not a multiple of %ds", r.WindowEnd.Format(time.RFC3339Nano), r.PeriodSeconds)
	case r.Rounds < 0 || r.MissedRounds < 0:
		return nil, bad("rounds %d, missed %d", r.Rounds, r.MissedRounds)
	}
	if len(r.Containers) > MaxContainers {
		return nil, fmt.Errorf("%w: %d containers, at most %d", ErrOversized, len(r.Containers), MaxContainers)
	}
	if len(r.OOMKills) > MaxOOMKills {
		return nil, fmt.Errorf("%w: %d OOM kills, at most %d", ErrOversized, len(r.OOMKills), MaxOOMKills)
	}
	if len(r.Adjustments) > MaxAdjustments {
		return nil, fmt.Errorf("%w: %d adjustments, at most %d", ErrOversized, len(r.Adjustments), MaxAdjustments)
	}
	if err := checkAmounts("usage", r.Usage.CPUCapacity, r.Usage.CPUAllocatable, r.Usage.CPURequests, r.Usage.CPUUsage,
		r.Usage.MemoryCapacity, r.Usage.MemoryAllocatable, r.Usage.MemoryRequests, r.Usage.MemoryUsage, float64(r.Usage.Pods)); err != nil {
		return nil, err
	}
	if p := r.Pools; p != nil && (p.SharedCPUs < 0 || p.ExclusiveCPUs < 0 || p.ReservedCPUs < 0 || p.ExclusivePods < 0) {
		return nil, bad("pools %+v", *p)
	}
	seen := make(map[Key]struct{}, len(r.Containers))
	counts := make([]ContainerCounts, len(r.Containers))
	for i := range r.Containers {
		c := &r.Containers[i]
		if err := c.Key.Validate(); err != nil {
			return nil, fmt.Errorf("container %d: %w", i, err)
		}
		if _, dup := seen[c.Key]; dup {
			return nil, bad("container %s listed twice", c.Key)
		}
		seen[c.Key] = struct{}{}
		cc, err := c.validate()
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Key, err)
		}
		counts[i] = cc
	}
	for i, k := range r.OOMKills {
		if err := k.validate(); err != nil {
			return nil, fmt.Errorf("oomKills[%d]: %w", i, err)
		}
	}
	for i, a := range r.Adjustments {
		if err := a.validate(); err != nil {
			return nil, fmt.Errorf("adjustments[%d]: %w", i, err)
		}
	}
	return counts, nil
}

func (c *Container) validate() (ContainerCounts, error) {
	var cc ContainerCounts
	if c.Pods < 1 {
		return cc, fmt.Errorf("%w: pods %d, want ≥ 1", ErrMalformed, c.Pods)
	}
	if c.Unadmitted < 0 || c.Unadmitted > c.Pods {
		return cc, fmt.Errorf("%w: %d unadmitted of %d pods", ErrMalformed, c.Unadmitted, c.Pods)
	}
	cur, orig := c.Current, c.Original
	if err := checkAmounts("resources", c.UsageCPU, c.UsageMemory, cur.CPURequest, cur.CPULimit, cur.MemoryRequest, cur.MemoryLimit,
		orig.CPURequest, orig.CPULimit, orig.MemoryRequest, orig.MemoryLimit); err != nil {
		return cc, err
	}
	if l := c.Local; l != nil {
		if err := checkAmounts("local", l.CPU.Target, l.CPU.Lower, l.CPU.Upper, l.CPU.Limit,
			l.Memory.Target, l.Memory.Lower, l.Memory.Upper, l.Memory.Limit); err != nil {
			return cc, err
		}
	}
	switch c.QOS {
	case "", "Guaranteed", "Burstable", "BestEffort":
	default:
		return cc, fmt.Errorf("%w: qos %q", ErrMalformed, c.QOS)
	}
	if c.Policy != "" {
		if err := checkName("policy", c.Policy, 253, dnsSubdomain); err != nil {
			return cc, err
		}
	}
	if len(c.Conflicts) > 16 {
		return cc, fmt.Errorf("%w: %d conflicting policies, at most 16", ErrOversized, len(c.Conflicts))
	}
	for _, p := range c.Conflicts {
		if err := checkName("conflicts", p, 253, dnsSubdomain); err != nil {
			return cc, err
		}
	}
	for name, v := range map[string]string{"mode": c.Mode, "preset": c.Preset, "reason": c.Reason} {
		if v != "" {
			if err := checkName(name, v, 63, token); err != nil {
				return cc, err
			}
		}
	}
	var err error
	if cc.CPU, err = decodeCounts(c.CPU, recommend.CPUHistogramOptions()); err != nil {
		return cc, fmt.Errorf("cpu: %w", err)
	}
	if cc.Memory, err = decodeCounts(c.Memory, recommend.MemoryHistogramOptions()); err != nil {
		return cc, fmt.Errorf("memory: %w", err)
	}
	if cc.Memory.Total() > cc.CPU.Total() {
		return cc, fmt.Errorf("%w: %d memory samples but %d CPU samples", ErrMalformed, cc.Memory.Total(), cc.CPU.Total())
	}
	return cc, nil
}

func decodeCounts(data []byte, o recommend.HistogramOptions) (*recommend.Counts, error) {
	c, err := recommend.NewCounts(o)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return c, nil
	}
	if err := c.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return c, nil
}

func (k *OOMKill) validate() error {
	if err := k.Key.Validate(); err != nil {
		return err
	}
	if err := checkName("pod", k.Pod, 253, dnsSubdomain); err != nil {
		return err
	}
	if k.Time.IsZero() {
		return fmt.Errorf("%w: time missing", ErrMalformed)
	}
	return checkAmounts("oomKill", k.UsageBytes, k.LimitBytes, k.RequestBytes)
}

func (a *Adjustment) validate() error {
	if err := a.Key.Validate(); err != nil {
		return err
	}
	if err := checkName("pod", a.Pod, 253, dnsSubdomain); err != nil {
		return err
	}
	switch {
	case a.Time.IsZero():
		return fmt.Errorf("%w: time missing", ErrMalformed)
	case a.Resource != ResourceCPU && a.Resource != ResourceMemory:
		return fmt.Errorf("%w: resource %q, want cpu or memory", ErrMalformed, a.Resource)
	case a.Reason != ReasonRecommendation && a.Reason != ReasonOOM:
		return fmt.Errorf("%w: reason %q, want %s or %s", ErrMalformed, a.Reason, ReasonRecommendation, ReasonOOM)
	case len(a.Error) > maxError:
		return fmt.Errorf("%w: error text of %d bytes, at most %d", ErrOversized, len(a.Error), maxError)
	}
	return checkAmounts("adjustment", a.From, a.To)
}

// Validate checks a key's names: namespace and container are DNS labels,
// name a DNS subdomain, kind an identifier.
func (k Key) Validate() error {
	if err := k.Workload.Validate(); err != nil {
		return err
	}
	return checkName("container", k.Container, 63, dnsLabel)
}

// Validate checks a workload's names.
func (w Workload) Validate() error {
	if err := checkName("namespace", w.Namespace, 63, dnsLabel); err != nil {
		return err
	}
	if err := checkName("kind", w.Kind, 63, kind); err != nil {
		return err
	}
	return checkName("name", w.Name, 253, dnsSubdomain)
}

// Character classes of names.
type class int

const (
	dnsLabel     class = iota // [a-z0-9-], alphanumeric at both ends
	dnsSubdomain              // dnsLabel plus '.'
	kind                      // [A-Za-z0-9], a letter first
	token                     // [A-Za-z0-9._-]
)

func checkName(field, s string, maxLen int, cl class) error {
	if s == "" || len(s) > maxLen {
		return fmt.Errorf("%w: %s %q: want 1..%d characters", ErrMalformed, field, truncate(s, 80), maxLen)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
		ok := false
		switch cl {
		case dnsLabel:
			ok = alnum || ch == '-' && i > 0 && i < len(s)-1
		case dnsSubdomain:
			ok = alnum || (ch == '-' || ch == '.') && i > 0 && i < len(s)-1
		case kind:
			upper := ch >= 'A' && ch <= 'Z'
			ok = upper || ch >= 'a' && ch <= 'z' || i > 0 && ch >= '0' && ch <= '9'
		case token:
			ok = alnum || ch >= 'A' && ch <= 'Z' || ch == '.' || ch == '_' || ch == '-'
		}
		if !ok {
			return fmt.Errorf("%w: %s %q: character %q at %d", ErrMalformed, field, truncate(s, 80), ch, i)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func checkAmounts(field string, vs ...float64) error {
	for _, v := range vs {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s: amount %v (want finite and ≥ 0)", ErrMalformed, field, v)
		}
	}
	return nil
}
