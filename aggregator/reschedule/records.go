package reschedule

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/api/report"
)

// Move states.
const (
	StateDenied     = "denied"     // the webhook refused it (Code, Detail say why)
	StateAdmitted   = "admitted"   // allowed; not followed yet
	StateEvicted    = "evicted"    // the pod went; its replacement is awaited
	StateMoved      = "moved"      // the replacement runs on another node (To)
	StateFailed     = "failed"     // not evicted (a PodDisruptionBudget...), or placed back on its node
	StateUnresolved = "unresolved" // no replacement placed within MoveTimeout
)

// Outcomes (the metric's labels).
const (
	OutcomeMoved      = "moved"
	OutcomeFailed     = "failed"
	OutcomeUnresolved = "unresolved"
)

// Move is one eviction the descheduler asked for, and what became of it.
type Move struct {
	ID        uint64          `json:"id"`
	Time      time.Time       `json:"time"`
	Namespace string          `json:"namespace"`
	Pod       string          `json:"pod"`
	Workload  report.Workload `json:"workload"`
	Node      string          `json:"node"`
	// Reason is the node's queue reason when the move was asked ("" when
	// it was not queued).
	Reason string `json:"reason,omitempty"`
	State  string `json:"state"`
	// Code classes a denial or failure (cap_node, pdb, ...); Detail says it
	// in a sentence.
	Code   string    `json:"code,omitempty"`
	Detail string    `json:"detail,omitempty"`
	To     string    `json:"to,omitempty"`
	Done   time.Time `json:"done,omitzero"`
	// Repeats counts the same refusal of the same pod asked again within
	// the hour (the descheduler asks every cycle): one record each.
	Repeats int `json:"repeats,omitempty"`
	// The pod's 7-day peak and latest use per pod (cores, bytes): what the
	// move takes off its node for the rule and for real use.
	PeakCPU  float64 `json:"peakCPU"`
	PeakMem  float64 `json:"peakMemory"`
	UsageCPU float64 `json:"usageCPU"`
	UsageMem float64 `json:"usageMemory"`

	podUID   types.UID
	owner    types.UID
	selector map[string]string
}

// amount is what the move counts for against a queue reason.
func (m *Move) amount(reason string) (cpu, mem float64) {
	if reason == ReasonPeak {
		return m.PeakCPU, m.PeakMem
	}
	return m.UsageCPU, m.UsageMem
}

func (m *Move) finished() bool {
	return m.State == StateMoved || m.State == StateFailed || m.State == StateUnresolved || m.State == StateDenied
}

// recordLocked appends m with the next ID and trims the records.
func (r *Rescheduler) recordLocked(m *Move) {
	r.nextID++
	m.ID = r.nextID
	r.moves = append(r.moves, m)
	cut := 0
	horizon := m.Time.Add(-8 * 24 * time.Hour)
	for cut < len(r.moves) && (len(r.moves)-cut > r.cfg.MaxRecords || r.moves[cut].Time.Before(horizon)) {
		cut++
	}
	if cut > 0 {
		r.moves = append(r.moves[:0], r.moves[cut:]...)
	}
}

// Check follows every admitted move not finished yet: evicted or not
// (then why, and its amount goes back to the node's queue entry), and
// where the evicted pod's replacement was placed.
func (r *Rescheduler) Check(ctx context.Context) {
	now := r.now()
	r.mu.Lock()
	r.lastCheck = now
	var due []Move
	for _, m := range r.moves {
		// An eviction is acted on at once; give the API server a few
		// seconds before reading the pod back.
		if (m.State == StateAdmitted && now.Sub(m.Time) >= 5*time.Second) || m.State == StateEvicted {
			due = append(due, *m)
		}
	}
	r.mu.Unlock()
	r.m.passes.WithLabelValues("check").Inc()
	for _, m := range due {
		if ctx.Err() != nil {
			return
		}
		state, code, detail, to := r.follow(ctx, m, now)
		if state == m.State {
			continue
		}
		r.mu.Lock()
		r.finishLocked(m.ID, state, code, detail, to, now)
		r.mu.Unlock()
	}
}

// follow reads what became of one move.
func (r *Rescheduler) follow(ctx context.Context, m Move, now time.Time) (state, code, detail, to string) {
	if m.State == StateAdmitted {
		pod, err := r.cluster.Pod(ctx, m.Namespace, m.Pod)
		if err != nil {
			return m.State, "", "", ""
		}
		if pod != nil && pod.UID == m.podUID && pod.DeletionTimestamp == nil {
			if pdb, err := r.cluster.BlockingPDB(ctx, pod); err == nil && pdb != "" {
				return StateFailed, "pdb", fmt.Sprintf("not evicted: PodDisruptionBudget %s/%s allows no disruption", m.Namespace, pdb), ""
			}
			return StateFailed, "not_evicted", "not evicted: the API server refused the eviction", ""
		}
		m.State = StateEvicted
	}
	node, err := r.cluster.Replacement(ctx, m.Namespace, m.owner, m.selector, m.Time.Add(-time.Second))
	switch {
	case err != nil:
	case node == m.Node:
		return StateFailed, "placed_back", "its replacement was placed back on " + node, node
	case node != "":
		return StateMoved, "", "", node
	}
	if now.Sub(m.Time) > r.cfg.MoveTimeout {
		return StateUnresolved, "not_placed", fmt.Sprintf("no replacement placed within %v", r.cfg.MoveTimeout), ""
	}
	return m.State, "", "", ""
}

// finishLocked records a move's new state; a move that failed gives its
// amount back to its node's queue entry (re-queued).
func (r *Rescheduler) finishLocked(id uint64, state, code, detail, to string, now time.Time) {
	var m *Move
	for i := len(r.moves) - 1; i >= 0; i-- {
		if r.moves[i].ID == id {
			m = r.moves[i]
			break
		}
	}
	if m == nil || m.finished() {
		return
	}
	m.State, m.Code, m.Detail, m.To = state, code, detail, to
	switch state {
	case StateMoved:
		m.Done = now
		r.m.outcomes.WithLabelValues(OutcomeMoved).Inc()
	case StateUnresolved:
		m.Done = now
		r.m.outcomes.WithLabelValues(OutcomeUnresolved).Inc()
	case StateFailed:
		m.Done = now
		r.m.outcomes.WithLabelValues(OutcomeFailed).Inc()
		if code != "placed_back" && m.Reason != "" {
			e := r.queue[m.Node]
			if e == nil {
				e = &Entry{Node: m.Node, Reason: m.Reason, Since: now}
				r.queue[m.Node] = e
			}
			c, mm := m.amount(e.Reason)
			e.CPU += c
			e.Memory += mm
			r.gaugesLocked()
		}
		r.log.Info("a move failed", "pod", m.Namespace+"/"+m.Pod, "node", m.Node, "why", detail)
	}
}

// Moves returns the records, newest first, at most limit.
func (r *Rescheduler) Moves(limit int) []Move {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Move, 0, min(limit, len(r.moves)))
	for i := len(r.moves) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, *r.moves[i])
	}
	return out
}

// Report is the daily report: what the records say of one UTC day (or of
// the last 24 hours).
type Report struct {
	Day  string    `json:"day"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Asked counts the evictions the descheduler asked for; Denied those
	// the webhook refused (caps, forbidden pods), the rest were admitted:
	// Moved, Failed, Unresolved or still Pending.
	Asked      int `json:"asked"`
	Denied     int `json:"denied"`
	Moved      int `json:"moved"`
	Failed     int `json:"failed"`
	Unresolved int `json:"unresolved"`
	Pending    int `json:"pending"`
	// SuccessRate is Moved over the admitted moves that finished (-1 when
	// none did).
	SuccessRate float64 `json:"successRate"`
	// Failures and Denials count by code.
	Failures map[string]int `json:"failures"`
	Denials  map[string]int `json:"denials"`
	// UnresolvedPods are the moves that ended unresolved or failed, the
	// latest first (at most 20); Queued the nodes still queued when the
	// report was made (today's only).
	UnresolvedPods []Move  `json:"unresolvedPods"`
	Queued         []Entry `json:"queued,omitempty"`
}

// ReportFor summarises the moves asked in [from, to).
func (r *Rescheduler) ReportFor(day string, from, to time.Time) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Day: day, From: from, To: to, Failures: map[string]int{}, Denials: map[string]int{}, UnresolvedPods: []Move{}}
	for i := len(r.moves) - 1; i >= 0; i-- {
		m := r.moves[i]
		if m.Time.Before(from) {
			break
		}
		if !m.Time.Before(to) {
			continue
		}
		rep.Asked++
		switch m.State {
		case StateDenied:
			rep.Denied++
			rep.Denials[m.Code]++
		case StateMoved:
			rep.Moved++
		case StateFailed, StateUnresolved:
			if m.State == StateFailed {
				rep.Failed++
			} else {
				rep.Unresolved++
			}
			rep.Failures[m.Code]++
			if len(rep.UnresolvedPods) < 20 {
				rep.UnresolvedPods = append(rep.UnresolvedPods, *m)
			}
		default:
			rep.Pending++
		}
	}
	rep.SuccessRate = -1
	if done := rep.Moved + rep.Failed + rep.Unresolved; done > 0 {
		rep.SuccessRate = float64(rep.Moved) / float64(done)
	}
	return rep
}

// Days returns the daily reports of the last n UTC days, today first
// (today's up to now, with the nodes still queued).
func (r *Rescheduler) Days(now time.Time, n int) []Report {
	today := now.UTC().Truncate(24 * time.Hour)
	out := make([]Report, 0, n)
	for i := range n {
		from := today.Add(-time.Duration(i) * 24 * time.Hour)
		to := from.Add(24 * time.Hour)
		rep := r.ReportFor(from.Format("2006-01-02"), from, to)
		if i == 0 {
			rep.Queued = r.Queue()
		}
		out = append(out, rep)
	}
	return out
}

// rollDay logs yesterday's report once, when a new UTC day starts.
func (r *Rescheduler) rollDay(now time.Time) {
	day := now.UTC().Format("2006-01-02")
	r.mu.Lock()
	first := r.lastDay == ""
	changed := r.lastDay != day
	r.lastDay = day
	r.mu.Unlock()
	if !changed || first {
		return
	}
	y := now.UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	rep := r.ReportFor(y.Format("2006-01-02"), y, y.Add(24*time.Hour))
	r.log.Info("daily rescheduling report", "day", rep.Day, "asked", rep.Asked, "moved", rep.Moved, "failed", rep.Failed,
		"unresolved", rep.Unresolved, "denied", rep.Denied, "successRate", rep.SuccessRate, "failures", rep.Failures, "denials", rep.Denials)
}

// Hourly counts, for each of the last n hours (oldest first), the moves
// asked in it by state: moved, failed (with unresolved), denied, and
// pending (admitted or evicted, not finished).
func (r *Rescheduler) Hourly(now time.Time, n int) []HourCount {
	start := now.UTC().Truncate(time.Hour).Add(-time.Duration(n-1) * time.Hour)
	out := make([]HourCount, n)
	for i := range out {
		out[i].Hour = start.Add(time.Duration(i) * time.Hour)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.moves) - 1; i >= 0; i-- {
		m := r.moves[i]
		if m.Time.Before(start) {
			break
		}
		h := int(m.Time.Sub(start) / time.Hour)
		if h >= n {
			continue
		}
		switch m.State {
		case StateMoved:
			out[h].Moved++
		case StateFailed, StateUnresolved:
			out[h].Failed++
		case StateDenied:
			out[h].Denied++
		default:
			out[h].Pending++
		}
	}
	return out
}

// HourCount is one hour of Hourly.
type HourCount struct {
	Hour    time.Time `json:"hour"`
	Moved   int       `json:"moved"`
	Failed  int       `json:"failed"`
	Denied  int       `json:"denied"`
	Pending int       `json:"pending"`
}
