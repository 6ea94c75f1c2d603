//go:build jepsen && linux

package jepsen

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // the calendar checker's zones, whatever the host has

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
)

// The window workloads (docs/design.md §8): the run's policy is a leased
// fixed-window one (PolicySpec.Window): 3s windows (TestWindows, many
// windows under every nemesis), or a real `period: day` in Europe/Paris
// (PolicySpec.Period, TestDailyWindow) whose day the run ends mid-run by
// moving every process's wall clock (RunConfig.WallStart): one day's end
// under a leader kill, checked against the wall clock's calendar
// (CheckCalendar).
//
// The window-count checker needs to know when each cluster window was
// in force, in the harness's monotonic time, without trusting the
// replicas' view of it. A probe (windowProbe) asks the cluster for a
// window chunk on a key of its own (tenant=window-probe, its own budget)
// every probeEvery: each answer is a committed grant whose
// window_reset_nanos is end − w, w the commit's window time, so
// w mod W = W − reset; the commit happened between the call's send s and
// its answer r. Window time is monotone (it is cluster time plus an offset
// that re-syncs only ever raise, §8.2), so from observations (s_i, r_i, w_i):
//
//	w(x) ≥ w_i  for x ≥ r_i
//	w(x) ≤ w_i  for x ≤ s_i
//
// (no bound on its rate is used: a re-sync steps it forward). Consecutive
// observations are unwrapped: between steps w_{i+1} − w_i is at least 0
// and at most (1+ρ)(r_{i+1} − s_i), which fixes the multiple of W when
// that is below W. A larger difference is a forward step (a re-sync), and
// it or a gap of more than maxProbeGap between answers (an election, after
// which the new leader re-syncs by about the gap, possibly more than W)
// starts a new segment, whose windows are numbered afresh. Window k of a
// segment, [kW, (k+1)W) in window time, is then certainly in force from the
// first r_i with w_i ≥ kW to the last s_i with w_i < (k+1)W: an inner
// approximation of the real time the cluster spent in it (a window cut by
// a segment break is checked in parts, each a lower bound). An admission
// counts in window k only when its whole decision interval [t, t_after]
// lies in that inner interval (certain.go's "certainly admitted"), so
// every count is at most what the cluster window really admitted, and a
// count above L is a
// certain violation. The figure: each window's count over L.
//
// Segments alone would miss window time going back (a restore that took
// the snapshot's window clock, the old rule of docs/design.md §8.2): the
// window met again after the restore is numbered afresh in its own
// segment, and each part stays within L. So each probe answer is followed
// by a reading of the leader's absolute window time (a dry-run re-sync,
// answered at AbsR): when it lies at most (1+ρ)(AbsR − S) ahead of the
// answer's phase, it names the answer's window time exactly, and the
// anchors most of a segment's answers agree on name its windows' absolute
// indexes. Consecutive named segments going on forward are then one
// stretch of absolute window time (the anchors settle what a gap left
// unknown modulo W) and are joined; the parts of one named window met in
// several stretches (in disjoint real time: window time went back) add
// up.

// probeEvery is the probe's period; windowRho is the clock rate error the
// checker allows window time (ρ is 1000 ppm; twice that, to be safe: a
// larger ρ only makes the inner intervals shorter).
const (
	probeEvery = 50 * time.Millisecond
	windowRho  = 0.002
	// maxProbeGap: consecutive answers further apart start a new segment
	// (an election froze cluster time, and the new leader's re-sync may
	// step window time forward by about as much, which could wrap W),
	// unless W is long enough that no gap and step can wrap it
	// (unwrapSpan).
	maxProbeGap = 250 * time.Millisecond
	// stepsPerGap bounds the forward re-syncs of window time between two
	// probe answers, each at most fsm.MaxWindowClockStepNanos (1 h): a
	// leader re-syncs once when it takes office, and a gap of seconds
	// holds at most a few elections.
	stepsPerGap = 4
	probeKey    = "window-probe"
)

// windowYAML is the fixed-window policy: limit Burst per Window.
func (p PolicySpec) windowYAML(key string) string {
	def := fmt.Sprintf("window: %s", p.Window)
	if p.Period != "" {
		def = fmt.Sprintf("period: %s\n    timezone: %s", p.Period, p.Timezone)
	}
	return fmt.Sprintf(`policies:
  - name: jepsen
    algorithm: fixed-window
    limit: %d
    %s
    key: %s
    charge: cost
`, p.Burst, def, key)
}

// windowBound is the any-interval bound the bound checker applies to a
// window policy: an interval of length T meets at most T(1+ρ)/W + 2
// cluster windows (each lasts at least W/(1+ρ) real time), each admitting
// at most L: 2L + L(1+ρ)/W per second.
func (p PolicySpec) windowBound() BoundSpec {
	l := p.Burst * 1000
	rate := int64(math.Ceil(float64(l) * (1 + windowRho) * float64(time.Second) / float64(p.Window)))
	return BoundSpec{CapacityMilli: 2 * l, RateMilliPerSec: rate}
}

// windowObs is one probe answer: sent at S, answered at R (monotonic ns),
// committed at window time ≡ Phase (mod Window). Abs, when not 0, is the
// leader's window time (unix ns) read right after the answer by a dry-run
// window re-sync (`rationctl windows status`'s call) that answered at
// AbsR: it names the absolute window of the answer (anchor), so that one
// cluster window met in two probe segments (around a restore, an
// election) is counted as one.
type windowObs struct {
	S, R, Phase, Window int64
	Abs, AbsR           int64
}

type windowProbe struct {
	mu   sync.Mutex
	obs  []windowObs
	errs int
	stop chan struct{}
	done chan struct{}
}

// startWindowProbe asks for a chunk on the probe key every probeEvery
// until stop, through the server the leader watch last saw leading (or
// each server in turn when none).
func (e *Env) startWindowProbe() *windowProbe {
	p := &windowProbe{stop: make(chan struct{}), done: make(chan struct{})}
	inc := uint64(time.Now().UnixNano())
	go func() {
		defer close(p.done)
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		seq, turn := uint64(0), 0
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			e.mu.Lock()
			target := e.leader
			e.mu.Unlock()
			if target == "" {
				srv := e.servers()
				if len(srv) == 0 {
					continue
				}
				turn++
				target = srv[turn%len(srv)]
			}
			e.mu.Lock()
			conn := e.conns[target]
			e.mu.Unlock()
			if conn == nil {
				continue
			}
			seq++
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			s := MonoNow()
			resp, err := api.NewLeasesClient(conn).Acquire(ctx, &api.AcquireRequest{
				Caller: &api.Caller{ClientId: probeKey, Incarnation: inc, Seq: seq},
				Keys: []*api.AcquireKey{{Key: &api.Key{Policy: "jepsen", Attributes: map[string]string{"tenant": probeKey}},
					Demand: &api.Demand{RateMilliPerSec: 1, BurstMilli: 1, MaxCostMilli: 1000}}}, // one unit per chunk
			})
			r := MonoNow()
			cancel()
			var g *api.Grant
			if err == nil && len(resp.GetLeases()) == 1 {
				g = resp.GetLeases()[0].GetGrant()
			}
			var abs, absR int64
			if g != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				wr, err := api.NewAdminClient(conn).WindowResync(ctx, &api.WindowResyncRequest{DryRun: true})
				absR = MonoNow()
				cancel()
				if err == nil {
					abs = wr.GetWindowUnixNanos()
				}
			}
			p.mu.Lock()
			if g == nil || g.GetWindowNanos() <= 0 || g.GetWindowResetNanos() <= 0 || g.GetWindowResetNanos() > g.GetWindowNanos() {
				p.errs++
			} else {
				o := windowObs{S: s, R: r, Phase: g.GetWindowNanos() - g.GetWindowResetNanos(), Window: g.GetWindowNanos()}
				if abs > 0 {
					o.Abs, o.AbsR = abs, absR
				}
				p.obs = append(p.obs, o)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// finish stops the probe, writes window-probes.csv and returns the
// observations.
func (p *windowProbe) finish(dir string) ([]windowObs, int) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	b.WriteString("sent_mono_ns,answered_mono_ns,window_phase_ns,window_ns,window_unix_ns,window_read_mono_ns\n")
	for _, o := range p.obs {
		fmt.Fprintf(&b, "%d,%d,%d,%d,%d,%d\n", o.S, o.R, o.Phase, o.Window, o.Abs, o.AbsR)
	}
	_ = os.WriteFile(filepath.Join(dir, "window-probes.csv"), []byte(b.String()), 0o644)
	return slices.Clone(p.obs), p.errs
}

// WindowCount is one cluster window's certain count.
type WindowCount struct {
	Segment, Index int
	// FromNanos, ToNanos: the inner interval (monotonic ns) certainly in
	// the window; AdmittedMilli: admissions whose whole decision interval
	// lies inside it.
	FromNanos, ToNanos int64
	AdmittedMilli      int64
	// Named: an anchor named the window's absolute index Abs (window
	// time / W); the counts of a named window's Parts (met in several
	// probe segments) add up, FromNanos and ToNanos then spanning them.
	Named bool
	Abs   int64
	Parts int
}

// WindowCheck is the window-count checker's result.
type WindowCheck struct {
	LimitMilli int64
	Window     time.Duration
	Windows    []WindowCount
	Violations []WindowCount
	Segments   int
	// Steps counts consecutive probes whose window times are further apart
	// than (1+ρ) times the real time between them allows: forward re-syncs.
	Steps int
	// Anchored: answers whose dry-run reading named their absolute window
	// time; AnchorsOff: anchors outvoted in their segment; Backs: named segments starting certainly below
	// the previous one's window time (window time went back); Joined:
	// window parts added to a part of the same window met in an earlier
	// segment.
	Anchored, AnchorsOff, Backs, Joined int
	// Bridged: probe segments joined to the one before (named, and
	// forward of it).
	Bridged int
	// Worst is the largest count; MinFull/MeanFull are the utilization
	// (count / L) over the full windows: inner interval at least 90% of
	// W/(1+ρ) (others were cut short by a gap in the probes) and inside
	// the load [loadFrom, loadTo].
	Worst             WindowCount
	MinFull, MeanFull float64
	FullWindows       int
	Err               string
}

// CheckWindows counts the certainly-admitted units per cluster window
// (see the top of this file) and reports every window above L.
// loadFrom and loadTo bound the offered load, for the utilization figure.
func CheckWindows(recs []Record, obs []windowObs, window time.Duration, limitMilli int64, loadFrom, loadTo int64) WindowCheck {
	res := WindowCheck{LimitMilli: limitMilli, Window: window}
	W := int64(window)
	obs = slices.Clone(obs)
	slices.SortStableFunc(obs, func(a, b windowObs) int { return cmp.Compare(a.S, b.S) })
	for _, o := range obs {
		if o.Window != W {
			res.Err = fmt.Sprintf("a probe saw a window of %v, the policy's is %v", time.Duration(o.Window), window)
			return res
		}
	}
	if len(obs) < 2 {
		res.Err = fmt.Sprintf("%d probe observations: nothing to place windows by", len(obs))
		return res
	}
	// Anchors: anch[i] is answer i's commit in absolute window time, when
	// its dry-run reading (Abs, at most (1+ρ)(AbsR − S) later in window
	// time without a step) names it: Abs less its excess over Phase
	// modulo W. A reading further ahead (a step between, or a calendar
	// day, whose phase is not unix time's) names nothing.
	anch := make([]int64, len(obs))
	has := make([]bool, len(obs))
	for i, o := range obs {
		if o.Abs <= 0 {
			continue
		}
		if d := ((o.Abs-o.Phase)%W + W) % W; float64(d) <= (1+windowRho)*float64(o.AbsR-o.S) {
			anch[i], has[i] = o.Abs-d, true
			res.Anchored++
		}
	}
	// Unwrap into segments: w[i] in window time relative to its segment.
	w := make([]int64, len(obs))
	seg := make([]int, len(obs))
	w[0] = obs[0].Phase
	for i := 1; i < len(obs); i++ {
		d := ((obs[i].Phase-obs[i-1].Phase)%W + W) % W
		maxD := (1 + windowRho) * float64(obs[i].R-obs[i-1].S)
		step := float64(d) > maxD
		if step {
			// A forward re-sync of window time (docs/design.md §8.2,
			// CmdWindowClock): its size is unknown modulo W.
			res.Steps++
		}
		if (!step && float64(d+W) > maxD && obs[i].R-obs[i-1].S <= int64(maxProbeGap)) || unwrapSpan(W, maxD) {
			w[i], seg[i] = w[i-1]+d, seg[i-1]
		} else {
			w[i], seg[i] = obs[i].Phase, seg[i-1]+1
		}
	}
	res.Segments = seg[len(seg)-1] + 1
	// segOff[s]: segment s's absolute window time less its relative one (a
	// multiple of W), the one most of its anchors name, when a strict
	// majority of them do (a re-sync between an answer and its reading,
	// by about a multiple of W, could name a wrong one).
	segOff := map[int]int64{}
	for lo := 0; lo < len(obs); {
		hi := lo
		votes := map[int64]int{}
		n := 0
		for hi < len(obs) && seg[hi] == seg[lo] {
			if has[hi] {
				votes[anch[hi]-w[hi]]++
				n++
			}
			hi++
		}
		for off, v := range votes {
			if 2*v > n && off%W == 0 {
				segOff[seg[lo]] = off
			}
			if 2*v <= n || off%W != 0 {
				res.AnchorsOff += v
			}
		}
		lo = hi
	}
	// Backs: consecutive named segments whose absolute window times
	// certainly went back (the later one's first answer below the
	// earlier one's last).
	lastAbs, lastNamed := int64(0), false
	for i := range obs {
		off, named := segOff[seg[i]]
		if !named {
			continue
		}
		if lastNamed && (i == 0 || seg[i] != seg[i-1]) && w[i]+off < lastAbs {
			res.Backs++
		}
		lastAbs, lastNamed = w[i]+off, true
	}
	// Bridges: consecutive named segments whose absolute window times go
	// on forward are one stretch of absolute window time (the anchors
	// resolve what a gap or a step left unknown modulo W), so they are
	// joined, their answers' w made absolute; an unnamed segment, or a
	// named one going back, starts a new one.
	joined := make([]int, len(obs))
	named := map[int]bool{}
	cur, prevNamed, lastAbs := -1, false, int64(math.MinInt64)
	for i := range obs {
		off, ok := segOff[seg[i]]
		if i == 0 || seg[i] != seg[i-1] {
			if ok && prevNamed && w[i]+off >= lastAbs {
				res.Bridged++
			} else {
				cur++
			}
		}
		if ok {
			w[i] += off
			lastAbs = w[i]
		}
		prevNamed = ok
		joined[i] = cur
		named[cur] = ok
	}
	seg = joined
	res.Segments = cur + 1
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b Record) int { return cmp.Compare(a.TMonoNanos, b.TMonoNanos) })
	full := float64(W) / (1 + windowRho) * 0.9
	var sumFull float64
	res.MinFull = math.Inf(1)
	for lo := 0; lo < len(obs); {
		hi := lo
		for hi < len(obs) && seg[hi] == seg[lo] {
			hi++
		}
		for k := w[lo] / W; k <= w[hi-1]/W; k++ {
			start, end := k*W, (k+1)*W
			from, to := int64(math.MaxInt64), int64(math.MinInt64)
			for i := lo; i < hi; i++ {
				if w[i] >= start && obs[i].R < from {
					from = obs[i].R
				}
				if w[i] < end {
					to = max(to, obs[i].S) // w ≤ w_i < end before s_i
				}
			}
			if from == math.MaxInt64 || to == math.MinInt64 || to <= from {
				continue
			}
			wc := WindowCount{Segment: seg[lo], Index: int(k), FromNanos: from, ToNanos: to, Parts: 1}
			if named[seg[lo]] {
				wc.Abs, wc.Named = k, true
			}
			j, _ := slices.BinarySearchFunc(sorted, from, func(r Record, t int64) int { return cmp.Compare(r.TMonoNanos, t) })
			for ; j < len(sorted) && sorted[j].TMonoNanos < to; j++ {
				if sorted[j].after() < to {
					wc.AdmittedMilli += sorted[j].CostMilli
				}
			}
			res.Windows = append(res.Windows, wc)
			if float64(to-from) >= full && from >= loadFrom && to <= loadTo {
				u := float64(wc.AdmittedMilli) / float64(limitMilli)
				sumFull += u
				res.MinFull = min(res.MinFull, u)
				res.FullWindows++
			}
		}
		lo = hi
	}
	// The counts: a named window's parts (in different segments, so in
	// disjoint real time) add up; an unnamed part counts alone.
	merged := map[int64]int{} // absolute window -> index in totals
	var totals []WindowCount
	for _, wc := range res.Windows {
		if !wc.Named {
			totals = append(totals, wc)
			continue
		}
		if i, ok := merged[wc.Abs]; ok {
			t := &totals[i]
			t.AdmittedMilli += wc.AdmittedMilli
			t.Parts++
			t.FromNanos, t.ToNanos = min(t.FromNanos, wc.FromNanos), max(t.ToNanos, wc.ToNanos)
			res.Joined++
			continue
		}
		merged[wc.Abs] = len(totals)
		totals = append(totals, wc)
	}
	for _, wc := range totals {
		if wc.AdmittedMilli > limitMilli {
			res.Violations = append(res.Violations, wc)
		}
		if wc.AdmittedMilli > res.Worst.AdmittedMilli {
			res.Worst = wc
		}
	}
	if res.FullWindows > 0 {
		res.MeanFull = sumFull / float64(res.FullWindows)
	} else {
		res.MinFull = 0
	}
	return res
}

// unwrapSpan: between two probe answers window time advances by at most
// maxD without a forward step ((1+ρ) times the real time between them),
// plus stepsPerGap steps of at most fsm.MaxWindowClockStepNanos. When that
// is below W, the phase difference modulo W is the true difference, so
// the answers stay in one segment across a gap (an election): a daily
// window is counted as one across a restart of every server. (An
// operator's `rationctl windows resync --max-step` may step further; the
// suite never runs one.)
func unwrapSpan(W int64, maxD float64) bool {
	return maxD+stepsPerGap*float64(fsm.MaxWindowClockStepNanos) < float64(W)
}

// name: segment/index, and the absolute index when named.
func (w WindowCount) name() string {
	if w.Named {
		return fmt.Sprintf("%d/%d (absolute %d)", w.Segment, w.Index, w.Abs)
	}
	return fmt.Sprintf("%d/%d", w.Segment, w.Index)
}

// OK: windows were placed and none admitted more than L.
func (c WindowCheck) OK() bool { return c.Err == "" && len(c.Windows) > 0 && len(c.Violations) == 0 }

func (c WindowCheck) Describe() string {
	if c.Err != "" {
		return c.Err
	}
	l := float64(c.LimitMilli) / 1000
	s := fmt.Sprintf("%d cluster windows of %v placed (%d probe segments, %d forward steps; %d answers anchored in absolute window time, %d outvoted, %d segments bridged, %d went back, %d window parts joined across segments); worst window admitted %.0f of L = %.0f (window %s, %.2fs certain in %d parts); utilization over %d full windows: min %.1f%%, mean %.1f%% of L",
		len(c.Windows), c.Window, c.Segments, c.Steps, c.Anchored, c.AnchorsOff, c.Bridged, c.Backs, c.Joined, float64(c.Worst.AdmittedMilli)/1000, l, c.Worst.name(),
		float64(c.Worst.ToNanos-c.Worst.FromNanos)/1e9, c.Worst.Parts, c.FullWindows, c.MinFull*100, c.MeanFull*100)
	if len(c.Violations) > 0 {
		var v []string
		for _, w := range c.Violations[:min(len(c.Violations), 5)] {
			v = append(v, fmt.Sprintf("window %s admitted %.0f > L in [%d, %d] (%d parts)", w.name(), float64(w.AdmittedMilli)/1000, w.FromNanos, w.ToNanos, w.Parts))
		}
		s = fmt.Sprintf("%d windows certainly above L: %s; ", len(c.Violations), strings.Join(v, "; ")) + s
	}
	if len(c.Windows) == 0 {
		s = "no window placed: nothing was checked; " + s
	}
	return s
}

// Calendar checker bounds: window time may lag the wall clock by an
// election's frozen cluster time until the new leader re-syncs it (a few
// seconds here), and run ahead of it by ρ over the run (milliseconds).
const (
	calendarMaxLag   = 10 * time.Second
	calendarMaxAhead = time.Second
)

// checkCalendar runs CheckCalendar on the run's probe answers, against
// the processes' wall clock (RunConfig.WallStart), which must be set.
func (e *Env) checkCalendar(obs []windowObs) CalendarCheck {
	p := e.cfg.Policy
	if e.cfg.WallStart.IsZero() {
		return CalendarCheck{Err: "a calendar window run needs RunConfig.WallStart"}
	}
	loc, err := time.LoadLocation(p.Timezone)
	if err != nil {
		return CalendarCheck{Err: err.Error()}
	}
	return CheckCalendar(obs, p.Period, loc, e.procWall, calendarMaxLag, calendarMaxAhead, true)
}

// CalendarCheck is the calendar checker's result (a calendar window
// policy, RunConfig.WallStart): every probe answer's window phase against
// the day the processes' wall clocks were in, computed here with the
// time package alone (not lease.WindowSpec, which it checks).
type CalendarCheck struct {
	Checked   int
	Off       []string // the first answers off the calendar
	OffCount  int
	Rollovers int // answers whose phase fell below the previous one's: a new day
	// MaxLag and MaxAhead: the most window time was certainly behind and
	// certainly ahead of the wall clock at some answer (each answer's
	// commit lies somewhere between its send and receipt).
	MaxLag, MaxAhead time.Duration
	Err              string
}

// CheckCalendar checks a day period in loc: the answer sent at S and
// answered at R (monotonic ns) was committed at a window time whose phase
// in its day is Phase, and window time is the leader's wall clock less a
// lag of at most maxLag (cluster time frozen by an election until the new
// leader's re-sync, docs/design.md §8.2) and at most maxAhead ahead of it
// (ρ): the wall-clock day's phase at R, less Phase, modulo the day, must
// lie in [−maxAhead, R − S + maxLag]. A day computed in the wrong zone is
// off by the zones' difference. wantRollover: the run must see a new day.
// It knows days without a DST change only (each of 24h, as the run's
// 2026-12-31 and 2027-01-01 in Paris): a day of 23h or 25h is an error,
// not a verdict.
func CheckCalendar(obs []windowObs, period string, loc *time.Location, wallAt func(mono int64) time.Time, maxLag, maxAhead time.Duration, wantRollover bool) CalendarCheck {
	var c CalendarCheck
	if period != "day" {
		c.Err = fmt.Sprintf("the calendar checker knows period day, not %q", period)
		return c
	}
	obs = slices.Clone(obs)
	slices.SortStableFunc(obs, func(a, b windowObs) int { return cmp.Compare(a.S, b.S) })
	for i, o := range obs {
		wr := wallAt(o.R).In(loc)
		y, m, d := wr.Date()
		midnight := time.Date(y, m, d, 0, 0, 0, 0, loc)
		W := int64(midnight.AddDate(0, 0, 1).Sub(midnight))
		if o.Window != W {
			c.Err = fmt.Sprintf("an answer at %s saw a window of %v; the day there lasts %v", wr.Format(time.RFC3339), time.Duration(o.Window), time.Duration(W))
			return c
		}
		diff := ((int64(wr.Sub(midnight))-o.Phase)%W + W) % W
		if diff > W/2 {
			diff -= W
		}
		c.Checked++
		if diff >= 0 {
			c.MaxLag = max(c.MaxLag, time.Duration(diff-(o.R-o.S)))
		} else {
			c.MaxAhead = max(c.MaxAhead, time.Duration(-diff))
		}
		if diff < -int64(maxAhead) || diff > o.R-o.S+int64(maxLag) {
			c.OffCount++
			if len(c.Off) < 3 {
				c.Off = append(c.Off, fmt.Sprintf("at %s the window time was %v into its day, the wall clock %v",
					wr.Format("2006-01-02T15:04:05.000Z07:00"), time.Duration(o.Phase), wr.Sub(midnight)))
			}
		}
		if i > 0 && o.Phase < obs[i-1].Phase {
			c.Rollovers++
		}
	}
	if c.Checked == 0 {
		c.Err = "no probe answer: nothing was checked"
	} else if wantRollover && c.Rollovers == 0 {
		c.Err = "no new day began during the run: the day boundary was not checked"
	}
	return c
}

// OK: answers were checked, none off the calendar, and the day changed
// if that was wanted.
func (c CalendarCheck) OK() bool { return c.Err == "" && c.OffCount == 0 }

func (c CalendarCheck) Describe() string {
	s := fmt.Sprintf("%d probe answers against the wall-clock calendar, %d new days; window time certainly behind the wall clock by up to %v, certainly ahead by up to %v",
		c.Checked, c.Rollovers, c.MaxLag.Round(time.Millisecond), c.MaxAhead.Round(time.Millisecond))
	if c.OffCount > 0 {
		s = fmt.Sprintf("%d answers off the calendar: %s; ", c.OffCount, strings.Join(c.Off, "; ")) + s
	}
	if c.Err != "" {
		s = c.Err + "; " + s
	}
	return s
}

// WindowRestore (docs/design.md §8.2's restore rule): the operator saves a
// snapshot (rationctl snapshot save), the leader is killed three times
// (each election freezes cluster time, and the new leader re-syncs window
// time forward to its wall clock by about the election's length, 1.5-2 s
// here), and the snapshot is restored under full load (rationctl snapshot
// restore), twice, 2W apart. Each restore must keep the cluster's window
// time (never back to the snapshot's) and hold the windows near it full:
// no window admits more than L, counted across the restore by its
// absolute window (CheckWindows' anchors). Every chunk lease is dropped by
// a restore (rule j): the grant-loss check excuses the grants
// acknowledged before the last one (Env.restoredAt). The detail gives
// window time's step across each restore: window time after it less
// before it, less the real time between the two readings (about 0 when it
// runs on, negative when it went back).
var WindowRestore = windowRestore(2)

// windowRestore restores the snapshot n times. Under the old rule
// (faults.WindowRestoreClockBack) each restore takes window time back by
// the re-syncs since the snapshot, until the leader's next reconcile (up
// to 5 s later) re-syncs it forward again (and the restore after it
// takes it back again): a spent window then admits L more, either while
// window time is back (an earlier window, spent before the restore, past
// the restore's hold) or after the re-sync (this window, admitting since
// it began, started afresh by the snapshot's state). Each restore is made
// between a fifth and a third into a window (W = 3s), so that this window
// has admitted before it.
func windowRestore(n int) Nemesis {
	return Nemesis{"window-restore", func(e *Env, _ *rand.Rand) string {
		path := filepath.Join(e.dir, "window.snap")
		e.mustRationctl("snapshot save", path)
		var killed []string
		for range 3 {
			l := e.mustLeader()
			e.kill(l)
			hold(2 * time.Second)
			e.restart(l)
			killed = append(killed, l)
		}
		W := int64(e.cfg.Policy.Window)
		var steps []string
		for i := range n {
			if i > 0 {
				hold(2 * e.cfg.Policy.Window)
			}
			before, beforeAt := e.windowTimeNow()
			if ph := before % W; ph < W/5 || ph >= W/3 {
				hold(time.Duration(((W/5-ph)%W + W) % W))
				before, beforeAt = e.windowTimeNow()
			}
			e.mustRationctl("snapshot restore", path)
			e.mu.Lock()
			e.restoredAt = MonoNow()
			e.mu.Unlock()
			after, afterAt := e.windowTimeNow()
			step := time.Duration(after-before) - time.Duration(afterAt-beforeAt)
			steps = append(steps, fmt.Sprintf("%v into a window, window time stepped %v", time.Duration(before%W).Round(time.Millisecond), step.Round(time.Millisecond)))
		}
		return fmt.Sprintf("rationctl snapshot save; kill -9 %s, each restarted after 2s; rationctl snapshot restore under load %d times: %s (each ±%v)",
			strings.Join(killed, ", then "), n, strings.Join(steps, "; "), windowReadTol.Round(time.Millisecond))
	}}
}

// windowReadTol bounds a dry-run reading's round trip, taken for the
// tolerance of windowTimeNow's step.
var windowReadTol = 100 * time.Millisecond

// windowTimeNow reads the leader's window time (a dry-run re-sync,
// `rationctl windows status`'s call) and the monotonic time half way
// through the call.
func (e *Env) windowTimeNow() (window, at int64) {
	e.waitFor(30*time.Second, "a reading of window time", func() error {
		l := e.currentLeader()
		if l == "" {
			return fmt.Errorf("no leader")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s := MonoNow()
		r, err := e.admin(l).WindowResync(ctx, &api.WindowResyncRequest{DryRun: true})
		if err != nil {
			return err
		}
		window, at = r.GetWindowUnixNanos(), s+(MonoNow()-s)/2
		return nil
	})
	return window, at
}
