package fsm

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Leased fixed windows (docs/design.md §8). A fixed-window policy's keys are lease.WindowLedgers, kept here beside the
// token-bucket ledgers; acquire, renew, release, revoke, expire, snapshots
// and restores reach them as the window kind (kinds.go). Window time (the calendar's clock) is cluster time plus a
// replicated epoch offset, set by the entry that turns the baseline on
// (the cluster's first) from its leader's wall clock, and moved forward (never back) by re-syncs to
// later leaders' wall clocks (CmdWindowClock).

// faultWindowSnapshotDropsKeys: snapshots leave out the window keys, so a
// restarted or caught-up server starts every window count afresh (the
// fsm window tests' negative control). Outside fault.go's sequence.
const faultWindowSnapshotDropsKeys fault = 0x40

var _ = registerFault(faultWindowSnapshotDropsKeys, "faultWindowSnapshotDropsKeys")

// faultWindowClockBackward: a re-sync also moves window time back (the
// never-backward rule's negative control). Outside fault.go's sequence.
const faultWindowClockBackward fault = 0x41

var _ = registerFault(faultWindowClockBackward, "faultWindowClockBackward")

// faultWindowIndexSkipsRelease: a window release does not re-index its
// key (the window index's differential test's negative control).
const faultWindowIndexSkipsRelease fault = 0x42

var _ = registerFault(faultWindowIndexSkipsRelease, "faultWindowIndexSkipsRelease")

// faultWindowSnapshotDropsSlew: snapshots leave out the slew in
// progress (the slew's snapshot test's negative control).
const faultWindowSnapshotDropsSlew fault = 0x43

var _ = registerFault(faultWindowSnapshotDropsSlew, "faultWindowSnapshotDropsSlew")

// faultWindowIndexSkipsHolder: the holder index keeps a key's first
// holders only (the revoke index's differential test's negative control).
const faultWindowIndexSkipsHolder fault = 0x44

var _ = registerFault(faultWindowIndexSkipsHolder, "faultWindowIndexSkipsHolder")

// faultWindowRestoreSnapshotClock: a restore takes the snapshot's window
// clock as it is, so window time goes back by the re-syncs since the
// snapshot (the restore rule's negative control, the old behaviour).
const faultWindowRestoreSnapshotClock fault = 0x45

var _ = registerFault(faultWindowRestoreSnapshotClock, "faultWindowRestoreSnapshotClock")

// faultWindowForgetSpent: a change of a window key's definition forgets
// the count of the window it leaves, as with FeatureWindowSpent off (the
// rule's negative control, the old behaviour).
const faultWindowForgetSpent fault = 0x46

var _ = registerFault(faultWindowForgetSpent, "faultWindowForgetSpent")

// faultWindowSnapshotDropsDebt: snapshots leave out a window key's debt
// and its chunks' allowances (TestWindowDebtSurvivesSnapshot's negative
// control).
const faultWindowSnapshotDropsDebt fault = 0x47

var _ = registerFault(faultWindowSnapshotDropsDebt, "faultWindowSnapshotDropsDebt")

// faultWindowAskFloorKept: a renewal's ask keeps its floors whatever the
// chunk holds (windowAsk's level 0), as with FeatureWindowAskLevel off (the rule's negative
// control, the old behaviour).
const faultWindowAskFloorKept fault = 0x48

var _ = registerFault(faultWindowAskFloorKept, "faultWindowAskFloorKept")

// Window lease settings: a window policy has no lease section; its chunks
// are leased for at most windowLeaseNanos, renewed after
// min(windowLeaseNanos/3, window/16) (at least MinEarlyRenewNanos), with
// the default drift bound.
const (
	windowLeaseNanos = int64(policy.DefaultLeaseDuration)
	windowDriftPPM   = policy.DefaultDriftPPM
)

type windowState struct {
	epochSet    bool
	epochOffset int64 // window time = cluster time + epochOffset − the slew taken
	// The slew (lease.WindowClock: SlewStart, SlewNanos, Slewed).
	slewStart, slewNanos, slewed int64
	// exhaustThrough: after a restore, windows starting at or before it
	// are full (every key's, created later too).
	exhaustThrough int64
	keys           map[string]map[string]*lease.WindowLedger
	// keying: what each name's keys were made under (windowKeysKept).
	keying map[string]windowKeying
	// idx: the window keys' due index (windowindex.go; derived).
	idx windowIndex
	// scanRef: the reference scan replaces the index (tests only).
	scanRef func(s *state, t int64, res *Result)
}

// windowTime is the window time of cluster time t.
func (s *state) windowTime(t int64) int64 { return s.windowClockAt().At(t) }

// windowClockAt is window time as a function of cluster time.
func (s *state) windowClockAt() lease.WindowClock {
	return lease.WindowClock{Offset: s.win.epochOffset, SlewStart: s.win.slewStart, SlewNanos: s.win.slewNanos, Slewed: s.win.slewed}
}

func (s *state) setWindowClock(c lease.WindowClock) {
	s.win.epochOffset, s.win.slewStart, s.win.slewNanos, s.win.slewed = c.Offset, c.SlewStart, c.SlewNanos, c.Slewed
}

// windowObserve readies a window ledger for an operation at cluster time
// t: the slew counter bounds how much slower than cluster time window
// time ran since its last one (lease.WindowLedger.ObserveSlew; 0 on a
// cluster that never slewed, where the carry is as before).
func (s *state) windowObserve(t int64, l *lease.WindowLedger) *lease.WindowLedger {
	l.ObserveSlew(s.windowClockAt().SlewedBy(t))
	return l
}

// windowIdle reports whether a window key can be collected at cluster
// time t (window time w): lease.WindowLedger.Idle, which also keeps a key
// holding an expired chunk that a forward re-sync let outlive its window,
// with FeatureWindowIdleCarry; the rule of v0.1.0 without it.
func (s *state) windowIdle(t, w int64, l *lease.WindowLedger) bool {
	if s.features&FeatureWindowIdleCarry == 0 {
		return l.IdleUncarried(t, w)
	}
	return s.windowObserve(t, l).Idle(t, w)
}

// windowsSwitched runs after a CmdSetFeatures entry at cluster time t: the
// entry that turns the baseline (FeatureWindows) on sets the epoch from
// its leader's wall clock (wallUnix; 0 leaves window time equal to cluster
// time); a later one changes nothing.
func (s *state) windowsSwitched(t, wallUnix int64) {
	if s.win.epochSet {
		return
	}
	s.win.epochSet = true
	if wallUnix > 0 {
		s.win.epochOffset = wallUnix - t
	}
}

// MaxWindowClockStepNanos is the largest forward step of window time one
// re-sync may make, and the largest excess one slew takes back. Elections
// freeze cluster time for seconds; a larger gap is a leader's wrong wall
// clock (or a whole-cluster outage, whose lag is then kept until an
// operator re-syncs with a larger max_step_nanos): the entry is refused,
// leaving window time as it was, rather than skipping windows.
const MaxWindowClockStepNanos = int64(time.Hour)

// MaxWindowClockOperatorStepNanos bounds an operator's re-sync
// (WindowClockCommand.max_step_nanos): a year and a day, beyond any
// outage a cluster's state should be stepped across.
const MaxWindowClockOperatorStepNanos = int64(366 * 24 * time.Hour)

// errWindowClock marks a refused re-sync (the leader logs it).
var errWindowClock = fmt.Errorf("%w: window clock re-sync", rpcerr.ErrPrecondition)

// windowClock applies a re-sync at cluster time t to wall clock wall:
// window time behind wall moves forward to it (ending a slew in
// progress), by at most MaxWindowClockStepNanos (or the operator's
// maxStep); window time ahead of wall changes nothing, or with slew starts
// a slew taking the excess back (at most MaxWindowClockStepNanos, or
// maxStep: window time then runs slower, never back).
func (s *state) windowClock(t, wall int64, slew bool, maxStep int64) (*Result, error) {
	if !s.win.epochSet {
		return nil, fmt.Errorf("%w: window time is not set", errWindowClock)
	}
	if maxStep < 0 || maxStep > MaxWindowClockOperatorStepNanos {
		return nil, fmt.Errorf("%w: max step %v is outside [0, %v]", errWindowClock, time.Duration(maxStep), time.Duration(MaxWindowClockOperatorStepNanos))
	}
	c := s.windowClockAt()
	w := c.At(t)
	if wall <= w || s.has(faultWindowClockBackward) {
		if s.has(faultWindowClockBackward) {
			s.win.epochOffset = wall - t
			s.rebuildWindowIndex()
			return &Result{}, nil
		}
		if !slew || wall == w {
			return &Result{}, nil
		}
		excess := w - wall
		if limit := max(MaxWindowClockStepNanos, maxStep); excess > limit {
			return nil, fmt.Errorf("%w: window time %s is %v ahead of the leader's wall clock %s, more than the %v a slew takes back; refused",
				errWindowClock, time.Unix(0, w).UTC().Format(time.RFC3339Nano), time.Duration(excess), time.Unix(0, wall).UTC().Format(time.RFC3339Nano), time.Duration(limit))
		}
		c.Slew(t, excess)
		s.setWindowClock(c)
		s.rebuildWindowIndex() // every idle time moved later
		return &Result{}, nil
	}
	step := wall - w
	limit := max(MaxWindowClockStepNanos, maxStep)
	if step < 0 || step > limit {
		return nil, fmt.Errorf("%w: the leader's wall clock %s is %v ahead of window time %s, more than the %v a re-sync may step; refused",
			errWindowClock, time.Unix(0, wall).UTC().Format(time.RFC3339Nano), time.Duration(step), time.Unix(0, w).UTC().Format(time.RFC3339Nano), time.Duration(limit))
	}
	c.Step(t, step)
	s.setWindowClock(c)
	s.rebuildWindowIndex() // every idle time moved
	return &Result{}, nil
}

// WindowClockState is window time as the leader re-syncs it.
type WindowClockState struct {
	// Set: leased windows are on and some window policy or key exists.
	Set bool
	// WindowNanos is window time (Unix nanoseconds) at the cluster time asked.
	WindowNanos int64
	// LagNanos is how far window time is behind the wall clock given
	// (negative: ahead).
	LagNanos int64
	// SlewLeftNanos is what the slew in progress has still to take back.
	SlewLeftNanos int64
}

// WindowClock reports window time at cluster time t against wall clock
// wall.
func (f *FSM) WindowClock(t, wall int64) WindowClockState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.st.win.epochSet || !f.st.hasWindows() {
		return WindowClockState{}
	}
	t = max(t, f.st.clusterTime)
	c := f.st.windowClockAt()
	w := c.At(t)
	return WindowClockState{Set: true, WindowNanos: w, LagNanos: wall - w, SlewLeftNanos: c.SlewLeft(t)}
}

// WindowClockLag is how far window time at cluster time t is behind
// wall (negative: ahead), and whether window time is set (leased windows
// on). The leader re-syncs when it lags.
func (f *FSM) WindowClockLag(t, wall int64) (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.st.win.epochSet || !f.st.hasWindows() {
		return 0, false
	}
	return wall - f.st.windowTime(max(t, f.st.clusterTime)), true
}

// hasWindows reports whether any window policy or window key exists: with
// none, window time affects nothing, and a leader does not re-sync it (so a
// cluster without window policies appends no CmdWindowClock entries, and a
// restart leaves its state as it was).
func (s *state) hasWindows() bool {
	if len(s.win.keys) > 0 {
		return true
	}
	for _, p := range s.policies {
		if leasedWindow(p.Algorithm) {
			return true
		}
	}
	return false
}

// windowNotLeasable is the refusal of a lease of a window policy the
// cluster does not lease (the exact sliding window).
func windowNotLeasable(p policy.Policy) error {
	return fmt.Errorf("policy %q: %w: policy %q uses %s: the cluster leases token buckets only; window algorithms are for simulate",
		p.Name, policy.ErrNotLeasable, p.Name, p.Algorithm)
}

// leasedWindow: the window algorithms the cluster leases in chunks.
func leasedWindow(a policy.Algorithm) bool {
	return a == policy.FixedWindow || a == policy.SlidingWindowApprox
}

func windowConfig(p policy.Policy) (lease.WindowLedgerConfig, error) {
	spec, err := p.WindowSpec()
	spec = windowSpecFault(spec)
	return lease.WindowLedgerConfig{LimitMilli: p.LimitMilli, Spec: spec, MaxLeases: int(p.MaxLeasesPerKey),
		Approx: p.Algorithm == policy.SlidingWindowApprox}, err
}

func sameWindowConfig(a, b lease.WindowLedgerConfig) bool {
	return a.LimitMilli == b.LimitMilli && a.MaxLeases == b.MaxLeases && a.Spec.Equal(b.Spec) && a.Approx == b.Approx && a.KeepSpent == b.KeepSpent &&
		a.MaxDebtMilli == b.MaxDebtMilli
}

// windowLedger finds (or, with create, makes) a window key's ledger, and
// applies the policy's current definition to it: a change mid-window keeps
// the count (lease.WindowLedger.Reconfigure).
func (s *state) windowLedger(t int64, p policy.Policy, k *api.Key, create bool) (string, *lease.WindowLedger, error) {
	ck, err := p.CanonicalKey(k.GetAttributes())
	if err != nil {
		return "", nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	cfg, err := windowConfig(p)
	cfg.KeepSpent = !s.has(faultWindowForgetSpent)
	if s.debt() && p.Algorithm == policy.FixedWindow {
		// FeatureDebt covers fixed windows too (docs/design.md §8.6); off,
		// max_debt is ignored as a server that predates it does.
		cfg.MaxDebtMilli = p.MaxDebtMilli
	}
	if err != nil {
		return ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	w := s.windowTime(t)
	l := s.win.keys[p.Name][ck]
	if l == nil {
		if !create {
			return ck, nil, fmt.Errorf("%w: policy %q has no key %q", lease.ErrLeaseNotFound, p.Name, ck)
		}
		if int64(len(s.win.keys[p.Name])) >= p.MaxKeys {
			s.collectWindows(t, p.Name)
		}
		if int64(len(s.win.keys[p.Name])) >= p.MaxKeys {
			return ck, nil, fmt.Errorf("%w: policy %q already tracks max_keys=%d keys", rpcerr.ErrResourceExhausted, p.Name, p.MaxKeys)
		}
		if l, err = lease.NewWindowLedger(cfg); err != nil {
			return ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		l = withWindowFault(l)
		if s.idGeneration > 0 {
			l.RaiseNextID(s.firstLeaseID())
		}
		if s.win.exhaustThrough != 0 {
			l.ExhaustThrough(s.win.exhaustThrough)
		}
		if s.win.keys == nil {
			s.win.keys = map[string]map[string]*lease.WindowLedger{}
		}
		if s.win.keys[p.Name] == nil {
			s.win.keys[p.Name] = map[string]*lease.WindowLedger{}
		}
		s.win.keys[p.Name][ck] = l
		s.windowTouch(p.Name, ck, l)
		s.setKeying(p.Name, windowKeying{alg: p.Algorithm, attrs: slices.Clone(p.Key)})
	}
	s.windowObserve(t, l)
	if !sameWindowConfig(l.Config(), cfg) {
		err := l.Reconfigure(t, w, cfg)
		s.windowTouch(p.Name, ck, l)
		if err != nil {
			return ck, nil, fmt.Errorf("policy %q key %q: %w", p.Name, ck, err)
		}
	}
	return ck, l, nil
}

// collectWindows drops a policy's window keys that are idle: no chunk, and
// their window over (a fresh key starts the same way; windowIdle).
func (s *state) collectWindows(t int64, name string) {
	w := s.windowTime(t)
	for ck, l := range s.win.keys[name] {
		if s.windowIdle(t, w, l) {
			s.windowUntrack(name, ck)
			delete(s.win.keys[name], ck)
		}
	}
	if len(s.win.keys[name]) == 0 {
		delete(s.win.keys, name)
		delete(s.win.keying, name)
	}
}

func (s *state) setKeying(name string, k windowKeying) {
	if s.win.keying == nil {
		s.win.keying = map[string]windowKeying{}
	}
	s.win.keying[name] = k
}

// windowRenewAfter is when a chunk's holder renews (asking for more).
func windowRenewAfter(windowLen int64) int64 {
	return max(min(windowLeaseNanos/policy.DefaultRenewDivisor, windowLen/16), MinEarlyRenewNanos)
}

// windowAsk sizes a chunk to the holder's demand: its rate over the time
// to its next renewal but one (at most to the window's end), at least
// twice its largest cost and one unit, in whole units (every client cost
// is whole: a fraction of a unit could never be spent). A demand not yet
// measured (the client's "as much as is fair" sentinel, above any real
// rate) asks for L/16, but at least min(L, 10 units), so a new holder's
// first few requests need no second round trip. (The reported burst, a
// second of the rate, is a token bucket's measure: it would hand the first
// asker most of a short window.) levelMilli, what a renewed chunk still
// holds (FeatureWindowAskLevel, 0 otherwise), covers the floors: they are
// asked only for what it does not cover, so a chunk that holds them and
// reports no need asks for nothing.
func windowAsk(d *api.Demand, limit, toEnd, renewAfter, levelMilli int64) int64 {
	var ask int64
	if rate := d.GetRateMilliPerSec(); rate > lease.MaxRateMilliPerSec || d.GetBurstMilli() > lease.MaxCapacityMilli {
		ask = max(limit/16, min(limit, 10*lease.MilliPerToken), d.GetMaxCostMilli())
	} else {
		floor := max(2*min(d.GetMaxCostMilli(), lease.MaxCapacityMilli), lease.MilliPerToken)
		ask = max(lease.MulDiv(rate, min(2*renewAfter, max(toEnd, 0)), lease.NanosPerSecond), floor-levelMilli, 0)
	}
	return min(ask+(lease.MilliPerToken-ask%lease.MilliPerToken)%lease.MilliPerToken, lease.MaxCapacityMilli)
}

func windowGrantProto(p policy.Policy, ck string, g lease.WindowGrant, renewal bool, w int64) *api.Grant {
	out := &api.Grant{
		LeaseId:              uint64(g.LeaseID),
		CapMilli:             g.TotalMilli,
		TtlNanos:             g.TTLNanos,
		RenewAfterNanos:      min(windowRenewAfter(g.End-g.Start), g.TTLNanos),
		DriftPpm:             windowDriftPPM,
		FailureMode:          string(policy.FailClosed),
		Shadow:               p.Shadow,
		CanonicalKey:         ck,
		KeyAttributes:        append([]string(nil), p.Key...),
		KeyAttributesSet:     true,
		PolicyBurstMilli:     p.LimitMilli,
		WindowLimitMilli:     g.LimitMilli,
		WindowNanos:          g.End - g.Start,
		WindowResetNanos:     g.End - w,
		WindowRemainingMilli: g.RemainingMilli,
		DebtAllowanceMilli:   g.DebtAllowanceMilli,
	}
	if renewal {
		out.TopUpMilli = g.ChunkMilli
	} else {
		out.StartMilli = g.ChunkMilli
	}
	return out
}

// windowAcquire grants a chunk of a window key.
func (s *state) windowAcquire(t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	ck, l, err := s.windowLedger(t, p, k.GetKey(), true)
	if err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	if seen[p.Name+"\x00"+ck] {
		return &api.KeyLease{Error: keyError(fmt.Errorf("%w: key %s/%s is listed twice in one request", rpcerr.ErrInvalid, p.Name, ck))}
	}
	seen[p.Name+"\x00"+ck] = true
	w := s.windowTime(t)
	start, end, _, _ := l.Window()
	if end == 0 || w >= end {
		start, end = l.Config().Spec.At(w)
	}
	g, err := l.Grant(t, w, lease.WindowGrantRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), Seq: c.GetSeq(),
		AskMilli: windowAsk(k.GetDemand(), p.LimitMilli, end-w, windowRenewAfter(end-start), 0),
		TTLNanos: windowLeaseNanos,
	})
	s.windowTouch(p.Name, ck, l)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	return &api.KeyLease{Grant: windowGrantProto(p, ck, g, false, w)}
}

// windowRenew extends a chunk and adds to it.
func (s *state) windowRenew(t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	ck, l, err := s.windowLedger(t, p, k.GetKey(), false)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	w := s.windowTime(t)
	start, end, _, _ := l.Window()
	if end == 0 || w >= end {
		start, end = l.Config().Spec.At(w)
	}
	// With FeatureWindowAskLevel the chunk's level, if said and in
	// [0, lease.MaxCapacityMilli], covers the ask's floors (windowAsk).
	var level int64
	if lv := k.GetWindowLevelMilli(); k.WindowLevelMilli != nil && lv >= 0 && lv <= lease.MaxCapacityMilli &&
		s.features&FeatureWindowAskLevel != 0 && !s.has(faultWindowAskFloorKept) {
		level = lv
	}
	g, err := l.Renew(t, w, lease.WindowRenewRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), LeaseID: lease.LeaseID(k.GetLeaseId()),
		AskMilli: windowAsk(k.GetDemand(), p.LimitMilli, end-w, windowRenewAfter(end-start), level),
		TTLNanos: windowLeaseNanos,
	})
	s.windowTouch(p.Name, ck, l)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	return &api.KeyLease{Grant: windowGrantProto(p, ck, g, true, w)}
}

// windowRelease ends a chunk, returning its unspent units to the window if
// it is still the chunk's.
func (s *state) windowRelease(t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	r := &api.ReleaseResult{}
	ck, l, err := s.windowLedger(t, p, k.GetKey(), false)
	if err == nil && !s.has(faultWindowIndexSkipsRelease) {
		defer s.windowTouch(p.Name, ck, l)
		unspent := k.GetUnspentMilli()
		if unspent < 0 || unspent > lease.MaxCapacityMilli {
			err = fmt.Errorf("%w: unspent_milli %d is outside [0, %d]", rpcerr.ErrInvalid, unspent, lease.MaxCapacityMilli)
		} else {
			var debt int64
			if s.debt() {
				debt = k.GetDebtMilli() // the debt the chunk was charged (rule w2)
			}
			if debt < 0 || debt > lease.MaxCapacityMilli {
				err = fmt.Errorf("%w: debt_milli %d is outside [0, %d]", rpcerr.ErrInvalid, debt, lease.MaxCapacityMilli)
			} else {
				r.CreditedMilli, err = l.ReleaseDebt(t, s.windowTime(t), c.GetClientId(), c.GetIncarnation(), lease.LeaseID(k.GetLeaseId()), unspent, debt)
			}
		}
	}
	if err != nil {
		r.Error = keyError(err)
	}
	return r
}

// windowRevoke retires the chunks of clientID's incarnations below
// incarnation, without credit, visiting only the window keys where the
// client holds chunks (the index's byClient; the same keys a scan of
// every key would change, since Revoke changes no other).
func (s *state) windowRevoke(clientID string, incarnation uint64) {
	if s.win.scanRef == nil {
		for _, it := range s.windowHeldBy(clientID) {
			if it.l.Revoke(clientID, incarnation) > 0 {
				s.windowTouch(it.name, it.key, it.l)
			}
		}
		return
	}
	// The reference scan (tests): every key.
	for _, pn := range sortedKeys(s.win.keys) {
		for _, ck := range sortedKeys(s.win.keys[pn]) {
			if s.win.keys[pn][ck].Revoke(clientID, incarnation) > 0 {
				s.windowTouch(pn, ck, s.win.keys[pn][ck])
			}
		}
	}
}

// windowExpire drops expired chunks and collects idle keys (every policy's,
// deleted ones included), visiting only the due ones (windowindex.go).
func (s *state) windowExpire(t int64, res *Result) {
	if s.win.scanRef != nil {
		s.win.scanRef(s, t, res)
		return
	}
	s.windowExpireIndexed(t, res)
}

// windowKeying is what a name's window keys were made under: a key's
// string means one budget only under the same algorithm and key
// attributes.
type windowKeying struct {
	alg   policy.Algorithm
	attrs []string
}

// windowKeysKept reports whether p keeps the window keys of its name: it
// keys them as they were made (or there are none).
func (s *state) windowKeysKept(p policy.Policy) bool {
	k, ok := s.win.keying[p.Name]
	return !ok || len(s.win.keys[p.Name]) == 0 || k.alg == p.Algorithm && slices.Equal(k.attrs, p.Key)
}

// windowCheckChange refuses a policy change that would start fresh window
// counts beside live ones: the name still has window keys holding a count
// in their current window, and the new definition keys them differently
// (other key attributes, or another algorithm), whether it replaces a
// live definition or re-creates a deleted one.
func (s *state) windowCheckChange(t int64, p policy.Policy) error {
	if s.windowKeysKept(p) {
		return nil
	}
	w := s.windowTime(t)
	var until int64
	n := 0
	for _, l := range s.win.keys[p.Name] {
		if !s.windowIdle(t, w, l) {
			n++
			_, end, _, _ := l.Window()
			until = max(until, end)
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: policy %q: %d window keys hold counts in windows that end by %s; a window policy whose key or algorithm changes can be applied once they have ended",
		rpcerr.ErrPrecondition, p.Name, n, time.Unix(0, until).UTC().Format(time.RFC3339))
}

// windowInstall drops a name's window keys when its new definition keys
// them differently (windowCheckChange passed, so they are idle).
func (s *state) windowInstall(p policy.Policy) {
	if !s.windowKeysKept(p) {
		for ck := range s.win.keys[p.Name] {
			s.windowUntrack(p.Name, ck)
		}
		delete(s.win.keys, p.Name)
		delete(s.win.keying, p.Name)
	}
}

// windowsPrepareRestore applies rule (j) to the restored window state
// (docs/design.md §8.2, "Restarts, leader changes, snapshots"), at the
// restored cluster time (max of the snapshot's, snapTime, and base's).
// Window time never goes back: the restored clock is base's (the replaced
// state's; lease.WindowClock.Restored), stepped forward to the snapshot's
// own window time if that is later; a snapshot taken before the elections
// since (whose re-syncs stepped window time forward) would otherwise move
// it back by their sum and restart windows already spent. Then every
// window that began by the restored window time RestoreHoldMarginNanos
// later (chunks the replaced state may have granted after base was read),
// or, if the clock was stepped, a window lease later (chunks the replaced
// state granted may then outlive their window), is full: the snapshot
// does not know what the replaced state granted in it.
func (s *state) windowsPrepareRestore(base RestoreBase, snapTime int64) {
	if !s.win.epochSet && len(s.win.keys) == 0 && !base.winSet {
		return
	}
	t, step := s.clusterTime, int64(0)
	if base.winSet && !s.has(faultWindowRestoreSnapshotClock) && !base.has(faultWindowRestoreSnapshotClock) {
		floor, slewed := int64(math.MinInt64), int64(0)
		if s.win.epochSet {
			c := s.windowClockAt()
			floor, slewed = c.At(snapTime), c.SlewedBy(snapTime)
		}
		for _, pn := range sortedKeys(s.win.keys) {
			for _, ck := range sortedKeys(s.win.keys[pn]) {
				st := s.win.keys[pn][ck].State()
				floor, slewed = max(floor, st.WindowNanos), max(slewed, st.SlewedNanos)
			}
		}
		var c lease.WindowClock
		c, step = base.winClock.Restored(t, floor, slewed)
		s.setWindowClock(c)
		s.win.epochSet = true
	}
	through := t + RestoreHoldMarginNanos
	if step > 0 {
		through += windowLeaseNanos
	}
	s.win.exhaustThrough = max(s.win.exhaustThrough, s.windowTime(through))
	for _, pn := range sortedKeys(s.win.keys) {
		for _, ck := range sortedKeys(s.win.keys[pn]) {
			l := s.win.keys[pn][ck]
			l.ExhaustThrough(s.win.exhaustThrough)
			l.RaiseNextID(s.firstLeaseID())
		}
	}
	s.rebuildWindowIndex()
}

// exportWindows is the state's frames of kind 6: the epoch first, then one
// per key, sorted.
func (s *state) exportWindows() []*api.WindowFrame {
	if !s.win.epochSet && len(s.win.keys) == 0 && s.win.exhaustThrough == 0 {
		return nil
	}
	out := []*api.WindowFrame{{EpochOffsetNanos: s.win.epochOffset, EpochSet: s.win.epochSet, ExhaustThroughNanos: s.win.exhaustThrough,
		SlewStartNanos: s.win.slewStart, SlewNanos: s.win.slewNanos, SlewedNanos: s.win.slewed}}
	if s.has(faultWindowSnapshotDropsSlew) {
		out[0].SlewStartNanos, out[0].SlewNanos, out[0].SlewedNanos = 0, 0, 0
	}
	for _, pn := range sortedKeys(s.win.keys) {
		if s.has(faultWindowSnapshotDropsKeys) {
			break
		}
		for _, ck := range sortedKeys(s.win.keys[pn]) {
			l := s.win.keys[pn][ck]
			st, cfg := l.State(), l.Config()
			ks := &api.WindowKeySnapshot{Policy: pn, Key: ck, NowNanos: st.NowNanos, WindowNowNanos: st.WindowNanos,
				StartNanos: st.Start, EndNanos: st.End, CountMilli: st.CountMilli, ExhaustThroughNanos: st.ExhaustThrough, NextId: uint64(st.NextID),
				LimitMilli: cfg.LimitMilli, FixedNanos: cfg.Spec.FixedNanos, Period: cfg.Spec.Period, Timezone: cfg.Spec.Timezone, MaxLeases: int64(cfg.MaxLeases),
				Approx: cfg.Approx, PrevCountMilli: st.PrevCountMilli,
				Algorithm: string(s.win.keying[pn].alg), KeyAttributes: slices.Clone(s.win.keying[pn].attrs), SlewedNanos: st.SlewedNanos,
				DebtMilli: st.DebtMilli, MaxDebtMilli: cfg.MaxDebtMilli}
			dropDebt := s.has(faultWindowSnapshotDropsDebt)
			if dropDebt {
				ks.DebtMilli = 0
			}
			for _, sp := range st.Spent {
				ks.Spent = append(ks.Spent, &api.WindowSpentSnapshot{FixedNanos: sp.Spec.FixedNanos, Period: sp.Spec.Period, Timezone: sp.Spec.Timezone,
					StartNanos: sp.Start, EndNanos: sp.End, CountMilli: sp.CountMilli})
			}
			for _, le := range st.Leases {
				ks.Leases = append(ks.Leases, &api.WindowLeaseSnapshot{Id: uint64(le.ID), ClientId: le.ClientID, Incarnation: le.Incarnation,
					GrantSeq: le.GrantSeq, ExpiresNanos: le.ExpiresNanos, WindowStartNanos: le.WindowStart, GrantedMilli: le.GrantedMilli, Replaced: le.Replaced,
					DebtAllowanceMilli: le.DebtAllowanceMilli})
				if dropDebt {
					ks.Leases[len(ks.Leases)-1].DebtAllowanceMilli = 0
				}
			}
			out = append(out, &api.WindowFrame{Key: ks})
		}
	}
	return out
}

// importWindow reads one frame of kind 6: the epoch, or a key's ledger with
// the definition it last applied (its policy's current one is applied at
// its next use, as on a server that did not restart).
func (st *state) importWindow(f *api.WindowFrame) error {
	ks := f.GetKey()
	if ks == nil {
		st.win.epochSet, st.win.epochOffset, st.win.exhaustThrough = f.GetEpochSet(), f.GetEpochOffsetNanos(), f.GetExhaustThroughNanos()
		st.win.slewStart, st.win.slewNanos, st.win.slewed = f.GetSlewStartNanos(), f.GetSlewNanos(), f.GetSlewedNanos()
		if st.win.slewNanos < 0 || st.win.slewed < 0 {
			return fmt.Errorf("%w: window slew %d, slewed %d", errSnapshot, st.win.slewNanos, st.win.slewed)
		}
		return nil
	}
	spec, err := lease.NewWindowSpec(ks.GetFixedNanos(), ks.GetPeriod(), ks.GetTimezone())
	if err != nil {
		return fmt.Errorf("%w: window key %s/%s: %w", errSnapshot, ks.GetPolicy(), ks.GetKey(), err)
	}
	cfg := lease.WindowLedgerConfig{LimitMilli: ks.GetLimitMilli(), Spec: spec, MaxLeases: int(ks.GetMaxLeases()), Approx: ks.GetApprox(),
		KeepSpent: true, MaxDebtMilli: ks.GetMaxDebtMilli()}
	ls := lease.WindowLedgerState{NowNanos: ks.GetNowNanos(), WindowNanos: ks.GetWindowNowNanos(), Start: ks.GetStartNanos(), End: ks.GetEndNanos(),
		CountMilli: ks.GetCountMilli(), PrevCountMilli: ks.GetPrevCountMilli(), ExhaustThrough: ks.GetExhaustThroughNanos(), NextID: lease.LeaseID(ks.GetNextId()),
		SlewedNanos: ks.GetSlewedNanos(), DebtMilli: ks.GetDebtMilli()}
	for _, sp := range ks.GetSpent() {
		spec, err := lease.NewWindowSpec(sp.GetFixedNanos(), sp.GetPeriod(), sp.GetTimezone())
		if err != nil {
			return fmt.Errorf("%w: window key %s/%s: spent window: %w", errSnapshot, ks.GetPolicy(), ks.GetKey(), err)
		}
		ls.Spent = append(ls.Spent, lease.WindowSpent{Spec: spec, Start: sp.GetStartNanos(), End: sp.GetEndNanos(), CountMilli: sp.GetCountMilli()})
	}
	for _, le := range ks.GetLeases() {
		ls.Leases = append(ls.Leases, lease.WindowLease{ID: lease.LeaseID(le.GetId()), ClientID: le.GetClientId(), Incarnation: le.GetIncarnation(),
			GrantSeq: le.GetGrantSeq(), ExpiresNanos: le.GetExpiresNanos(), WindowStart: le.GetWindowStartNanos(), GrantedMilli: le.GetGrantedMilli(), Replaced: le.GetReplaced(),
			DebtAllowanceMilli: le.GetDebtAllowanceMilli()})
	}
	l, err := lease.NewWindowLedgerFromState(cfg, ls)
	if err != nil {
		return fmt.Errorf("%w: window key %s/%s: %w", errSnapshot, ks.GetPolicy(), ks.GetKey(), err)
	}
	l = withWindowFault(l)
	if st.win.keys == nil {
		st.win.keys = map[string]map[string]*lease.WindowLedger{}
	}
	if st.win.keys[ks.GetPolicy()] == nil {
		st.win.keys[ks.GetPolicy()] = map[string]*lease.WindowLedger{}
	}
	if st.win.keys[ks.GetPolicy()][ks.GetKey()] != nil {
		return fmt.Errorf("%w: window key %s/%s is listed twice", errSnapshot, ks.GetPolicy(), ks.GetKey())
	}
	st.win.keys[ks.GetPolicy()][ks.GetKey()] = l
	k := windowKeying{alg: policy.Algorithm(ks.GetAlgorithm()), attrs: slices.Clone(ks.GetKeyAttributes())}
	if old, ok := st.win.keying[ks.GetPolicy()]; ok && (old.alg != k.alg || !slices.Equal(old.attrs, k.attrs)) {
		return fmt.Errorf("%w: window keys of %s made under two keyings", errSnapshot, ks.GetPolicy())
	}
	st.setKeying(ks.GetPolicy(), k)
	return nil
}

// windowListing adds the window keys and their chunks to a listing (after
// the token-bucket ones): a key's current window, its count G and limit;
// a chunk's units as its cap and grant (no rate).
func (s *state) windowListing(out *api.ListLeasesResponse, policyName, key string, now int64) {
	for _, pn := range sortedKeys(s.win.keys) {
		if policyName != "" && pn != policyName {
			continue
		}
		for _, ck := range sortedKeys(s.win.keys[pn]) {
			if key != "" && ck != key {
				continue
			}
			l := s.win.keys[pn][ck]
			start, end, count, limit := l.Window()
			out.Keys = append(out.Keys, &api.KeyInfo{Policy: pn, Key: ck, CapacityMilli: limit,
				WindowStartUnixNanos: start, WindowEndUnixNanos: end, WindowCountMilli: count, WindowLimitMilli: limit, DebtMilli: l.DebtMilli()})
			for _, le := range l.State().Leases {
				if le.ExpiresNanos <= now {
					continue
				}
				out.Leases = append(out.Leases, &api.LeaseInfo{Policy: pn, Key: ck, ClientId: le.ClientID, Incarnation: le.Incarnation,
					LeaseId: uint64(le.ID), CapMilli: le.GrantedMilli, StartMilli: le.GrantedMilli, HeldCapMilli: le.GrantedMilli,
					ExpiresNanos: le.ExpiresNanos, ExpiresInNanos: le.ExpiresNanos - now})
			}
		}
	}
}
