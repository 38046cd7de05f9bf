package rightsize

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/recommend"
)

// Engine keeps the usage histograms of a node's workload containers and
// reads recommendations from them. Every preset in use has its own
// Recommender (histogram settings differ between presets), fed with every
// sample, so a pod moving between policies keeps its history; a policy's
// overrides only change how targets are read (recommend.RecommendWith).
type Engine struct {
	mu        sync.Mutex
	dir       string // checkpoint directory; "" keeps state in memory
	def       string
	recs      map[string]*recommend.Recommender
	recorders map[string]map[string]*recommend.Recorder // preset -> key -> recorder
	// cache holds each key's recommendation for the current step, so the
	// pods of one workload share one read per step (each read advances
	// the recommender's hysteresis and violation tracking).
	cache map[cacheKey]cached
	// ooms are the recent kills per container instance, for the bump
	// (Kills, bumps.go).
	ooms map[string][]time.Time
	// bumps are the OOM bumps per container instance, for the policy's
	// maxOOMBumpsPerDay, kept in the checkpoint directory (bumps.go).
	bumps map[string][]time.Time
	// bumpsWrite serializes the bump log's writes (taken before mu).
	bumpsWrite sync.Mutex
	// spec are the resources in force per key, for the limit ratio.
	spec map[string]recommend.Resources
}

type cacheKey struct {
	preset, key string
	over        recommend.OverridesKey
}

type cached struct {
	at  time.Time
	rec recommend.Recommendation
	ok  bool
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Presets are fed from the start (the default preset always is).
	Presets       []string
	DefaultPreset string // "" means recommend.DefaultPreset
	// CheckpointDir holds one checkpoint per preset; "" keeps state in
	// memory only.
	CheckpointDir string
}

// NewEngine returns an Engine, loading each preset's checkpoint and the
// OOM bump log. A corrupt checkpoint is moved aside and its preset (or
// the bump counts) starts fresh (the error is returned in the list); a
// preset checkpoint of a newer format is an error: overwriting it would
// destroy a newer agent's state.
func NewEngine(o EngineOptions) (*Engine, []error, error) {
	e := &Engine{dir: o.CheckpointDir, def: o.DefaultPreset, recs: map[string]*recommend.Recommender{},
		recorders: map[string]map[string]*recommend.Recorder{}, cache: map[cacheKey]cached{}, ooms: map[string][]time.Time{}, spec: map[string]recommend.Resources{}}
	if e.def == "" {
		e.def = recommend.DefaultPreset
	}
	var warns []error
	bumps, err := openBumps(e.dir, time.Now())
	if err != nil {
		warns = append(warns, err)
	}
	e.bumps = bumps
	more, err := e.ensure(append([]string{e.def}, o.Presets...))
	return e, append(warns, more...), err
}

// checkpoint is the file of one preset.
func (e *Engine) checkpoint(preset string) string {
	return filepath.Join(e.dir, "recommend-"+preset+".checkpoint")
}

// ensure creates the Recommenders of presets that have none. e.mu held or
// not yet shared.
func (e *Engine) ensure(presets []string) ([]error, error) {
	var warns []error
	for _, name := range presets {
		if _, ok := e.recs[name]; ok {
			continue
		}
		p, err := recommend.Preset(name)
		if err != nil {
			return warns, err
		}
		r, err := recommend.New(p)
		if err != nil {
			return warns, err
		}
		if e.dir != "" {
			err := r.LoadCheckpoint(e.checkpoint(name))
			var ve *recommend.VersionError
			switch {
			case err == nil, errors.Is(err, fs.ErrNotExist):
			case errors.As(err, &ve) && ve.Version > recommend.CheckpointVersion:
				return warns, err
			default:
				warns = append(warns, err)
			}
		}
		e.recs[name] = r
		e.recorders[name] = map[string]*recommend.Recorder{}
	}
	return warns, nil
}

// UsePresets makes sure every preset a policy names is fed from now on.
// A preset new to the node starts empty (its containers need minHistory
// again) unless it has a checkpoint.
func (e *Engine) UsePresets(presets []string) ([]error, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ensure(presets)
}

// Presets lists the presets fed.
func (e *Engine) Presets() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.recs))
}

// Round feeds one collection round to every preset (collector.Sink).
func (e *Engine) Round(t time.Time, samples []collector.Sample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for preset, r := range e.recs {
		hs := e.recorders[preset]
		for i := range samples {
			s := &samples[i]
			h, ok := hs[s.Target.Key]
			if !ok {
				h = r.Recorder(s.Target.Key)
				hs[s.Target.Key] = h
			}
			// A sample the recommender refuses (older than the last, say
			// after a clock step) changes nothing; the next round goes on.
			_ = h.Add(recommend.Sample{Time: t, CPUCores: s.CPUCores, MemoryBytes: float64(s.MemoryWorkingSet)})
		}
	}
}

// SetResources tells every preset the requests and limits in force for a
// workload container (the limit/request ratio of its recommendations).
func (e *Engine) SetResources(key string, res recommend.Resources) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.spec[key] == res {
		return
	}
	e.spec[key] = res
	for _, r := range e.recs {
		r.SetResources(key, res)
	}
}

// Recommendation is the target of key under preset and overrides at now,
// read at most once per step: within step of the last read the same
// answer is returned. ok is false while the container has too little
// history.
func (e *Engine) Recommendation(preset string, over recommend.Overrides, key string, now time.Time, step time.Duration) (recommend.Recommendation, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.recs[preset]
	if !ok {
		return recommend.Recommendation{}, false, fmt.Errorf("%w: preset %q is not fed on this node", ErrInvalidPolicy, preset)
	}
	ck := cacheKey{preset: preset, key: key, over: over.Key()}
	if c, ok := e.cache[ck]; ok && now.Sub(c.at) < step && !now.Before(c.at) {
		return c.rec, c.ok, nil
	}
	rec, ok, err := r.RecommendWith(key, now, over)
	if err != nil {
		return recommend.Recommendation{}, false, err
	}
	e.cache[ck] = cached{at: now, rec: rec, ok: ok}
	return rec, ok, nil
}

// RecordOOM tells every preset of an OOM kill of key.
func (e *Engine) RecordOOM(key string, ev recommend.OOMEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.recs {
		_ = r.RecordOOM(key, ev)
	}
}

// Keys lists the workload containers any preset has state for (fed since
// the start or loaded from a checkpoint), sorted.
func (e *Engine) Keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	set := map[string]bool{}
	for _, r := range e.recs {
		for _, id := range r.IDs() {
			set[id] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Forget drops a workload container no pod of this node runs any more.
func (e *Engine) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for preset, r := range e.recs {
		r.Forget(key)
		delete(e.recorders[preset], key)
	}
	delete(e.spec, key)
	for ck := range e.cache {
		if ck.key == key {
			delete(e.cache, ck)
		}
	}
}

// Save checkpoints every preset; the first error is returned after all
// were tried.
func (e *Engine) Save(now time.Time) error {
	if e.dir == "" {
		return nil
	}
	e.mu.Lock()
	recs := make(map[string]*recommend.Recommender, len(e.recs))
	for n, r := range e.recs {
		recs[n] = r
	}
	e.mu.Unlock()
	var errs []error
	for n, r := range recs {
		if err := r.SaveCheckpoint(e.checkpoint(n), now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Usage is the decayed usage of key under the default preset's histograms.
func (e *Engine) Usage(key string) (recommend.Usage, bool) {
	e.mu.Lock()
	r := e.recs[e.def]
	e.mu.Unlock()
	return r.Usage(key)
}
