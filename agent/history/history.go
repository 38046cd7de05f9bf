package history

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
)

// Window is the length of one history row.
const Window = 5 * time.Minute

// Header is the first line of an export: recommend's trace format.
const Header = "ts,series,cpu_cores,mem_bytes,cpu_cores_max"

// Options configure a Store.
type Options struct {
	Dir       string
	Retention time.Duration // default 14 days
	MaxBytes  int64         // default 256 MiB
	Now       func() time.Time
}

// Store folds rounds into windows and keeps them on disk.
type Store struct {
	opts Options

	mu      sync.Mutex
	start   time.Time            // the window in progress
	acc     map[instance]*window // by instance
	dropped int64                // rows not written (size cap, write errors)
	lastErr error
}

type instance struct{ series, pod, container string }

type window struct {
	cpuSum float64
	n      int
	cpuMax float64
	memMax uint64
}

// Open prepares dir (created 0700) and removes what is past retention.
func Open(o Options) (*Store, error) {
	if o.Retention <= 0 {
		o.Retention = 14 * 24 * time.Hour
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("history %s: %w", o.Dir, err)
	}
	s := &Store{opts: o, acc: map[instance]*window{}}
	if err := s.prune(o.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// Round folds one collection round in (collector.Sink).
func (s *Store) Round(t time.Time, samples []collector.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w0 := t.Truncate(Window)
	if !s.start.IsZero() && w0.After(s.start) {
		s.flushLocked()
	}
	if s.start.IsZero() || w0.After(s.start) {
		s.start = w0
	}
	for i := range samples {
		x := &samples[i]
		k := instance{series: x.Target.Key, pod: x.Target.PodUID, container: x.Target.Container}
		w := s.acc[k]
		if w == nil {
			w = &window{}
			s.acc[k] = w
		}
		w.cpuSum += x.CPUCores
		w.n++
		w.cpuMax = max(w.cpuMax, x.CPUCores)
		w.memMax = max(w.memMax, x.MemoryWorkingSet)
	}
}

// Flush writes the window in progress (at shutdown).
func (s *Store) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

// flushLocked appends the window's rows, stamped with the window's end,
// in one write.
func (s *Store) flushLocked() {
	if len(s.acc) == 0 {
		return
	}
	end := s.start.Add(Window)
	keys := make([]instance, 0, len(s.acc))
	for k := range s.acc {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].series != keys[j].series {
			return keys[i].series < keys[j].series
		}
		return keys[i].pod < keys[j].pod
	})
	var b strings.Builder
	for _, k := range keys {
		w := s.acc[k]
		fmt.Fprintf(&b, "%d,%s,%s,%d,%s\n", end.Unix(), csvField(k.series), fmtFloat(w.cpuSum/float64(w.n)), w.memMax, fmtFloat(w.cpuMax))
	}
	clear(s.acc)
	if err := s.appendDay(end, b.String()); err != nil {
		s.dropped += int64(len(keys))
		s.lastErr = err
	}
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// csvField quotes a series name that would break a CSV row; workload
// names never do, but nothing here trusts that.
func csvField(v string) string {
	if strings.ContainsAny(v, ",\"\n\r") {
		return `"` + strings.ReplaceAll(v, `"`, `""`) + `"`
	}
	return v
}

func (s *Store) file(day time.Time) string {
	return filepath.Join(s.opts.Dir, "history-"+day.UTC().Format("20060102")+".csv")
}

func (s *Store) appendDay(t time.Time, rows string) error {
	if err := s.prune(t); err != nil {
		return err
	}
	if s.size()+int64(len(rows)) > s.opts.MaxBytes {
		return fmt.Errorf("history %s: size cap %d bytes reached; rows dropped", s.opts.Dir, s.opts.MaxBytes)
	}
	f, err := os.OpenFile(s.file(t), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(rows)
	cerr := f.Close()
	return errors.Join(werr, cerr)
}

// days lists the day files, oldest first.
func (s *Store) days() []string {
	m, _ := filepath.Glob(filepath.Join(s.opts.Dir, "history-*.csv"))
	sort.Strings(m)
	return m
}

func (s *Store) size() int64 {
	var n int64
	for _, f := range s.days() {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// prune removes days past retention, then the oldest days while the
// directory is over its cap (today's file is never removed).
func (s *Store) prune(now time.Time) error {
	cut := now.Add(-s.opts.Retention).UTC().Format("20060102")
	today := filepath.Base(s.file(now))
	var errs []error
	for _, f := range s.days() {
		if day := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "history-"), ".csv"); day < cut {
			if err := os.Remove(f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for days := s.days(); s.size() > s.opts.MaxBytes && len(days) > 0 && filepath.Base(days[0]) != today; days = s.days() {
		if err := os.Remove(days[0]); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// Dropped returns how many rows were not written, and the last reason.
func (s *Store) Dropped() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped, s.lastErr
}

// Export writes the header and every row from since on, oldest first, to
// w. A torn last line (a crash mid-write) is skipped.
func (s *Store) Export(w io.Writer, since time.Time) (int, error) {
	s.mu.Lock()
	files := s.days()
	s.mu.Unlock()
	if _, err := io.WriteString(w, Header+"\n"); err != nil {
		return 0, err
	}
	sinceDay := since.UTC().Format("20060102")
	rows := 0
	for _, name := range files {
		if day := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "history-"), ".csv"); day < sinceDay {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return rows, err
		}
		br := bufio.NewReaderSize(f, 64<<10)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break // EOF: a last line without its newline is torn
			}
			ts, rest, ok := strings.Cut(line, ",")
			sec, perr := strconv.ParseInt(ts, 10, 64)
			if !ok || perr != nil || strings.Count(rest, ",") < 3 {
				continue
			}
			if time.Unix(sec, 0).Before(since) {
				continue
			}
			if _, err := io.WriteString(w, line); err != nil {
				f.Close()
				return rows, err
			}
			rows++
		}
		f.Close()
	}
	return rows, nil
}
