package lease

// The ledger and the fair division as they were before the incremental
// per-key indexes of ledger_index.go (commit 8b1c91a), kept verbatim but
// for the names (Ledger is refLedger, helpers take a ref prefix) as the
// reference of the differential tests (ledger_diff_test.go): the indexed
// ledger must give bit-identical states and answers for every operation
// sequence.
//
// Generated from lease/ledger.go, lease/fairshare.go and
// lease/ledger_start.go at 8b1c91a; do not edit.

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
)

var _ = errors.New

// refLedger is the coordinator's account of one policy key's budget: the pool of
// unleased tokens and the leases. Every operation takes the leader-stamped
// cluster time, which must not go backwards; nothing here reads a clock, and
// iteration is over a sorted slice, so replicas applying the same operations
// reach byte-identical states.
//
// The rules, checked by CheckInvariants after every operation in tests:
//
//	(a) Σ held r_i <= r, and pool + Σ held b_i <= B.
//	(b) A share a renewal reduces stays held at its old value until the
//	    superseded version's expiry, or until a renewal acknowledging a
//	    newer version commits (only versions strictly older than the
//	    acknowledged one are dropped; unversioned ones never early).
//	(c) A new lease's bucket starts with tokens debited from the pool.
//	(d) A renewal adds no tokens to a client's bucket except a top-up
//	    debited from the pool, at most the raise of its cap (rule i).
//	(e) A release credits back at most min(unspent, b_i) and frees r_i, b_i.
//	(f) An expiry frees r_i and b_i and returns no tokens.
//	(g) The pool mints at r - Σ held r_i up to B - Σ held b_i.
//	(h) A grant that replaces the same holder's live lease keeps the
//	    replaced lease's held terms held until its expiry, summed with the
//	    new lease's (a second user of the holder may still use them).
//	(j) After HoldAll(now, until) (a snapshot restore), everything counts as
//	    held until then: leases granted after the snapshot was taken are
//	    unknown to the restored state and may still be in use.
//	(i) The tokens a client's bucket lost to a reduced
//	    cap when it installed the version a renewal acknowledges return to
//	    the pool at that renewal's commit, at most the cap the older held
//	    versions it drops have above the acknowledged one; and a
//	    renewal that raises a lease's cap moves up to the raise from the
//	    pool into its bucket (the top-up), instead of burning it.
type refLedger struct {
	s        LedgerState
	fault    Fault
	quietAck bool // the last renewal's RenewRequest.QuietAck
}

// newRefLedger returns a ledger whose pool starts full or empty at startNanos.
func newRefLedger(cfg LedgerConfig, startNanos int64) (*refLedger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTime(startNanos); err != nil {
		return nil, err
	}
	l := &refLedger{s: LedgerState{Config: cfg, PoolNanos: startNanos, NowNanos: startNanos, NextID: 1}}
	l.s.PoolRateMilliPerSec, _ = l.poolTerms(startNanos)
	if cfg.StartFull {
		l.s.PoolMilli = cfg.CapacityMilli
		l.s.InitialPoolMilli = cfg.CapacityMilli
	}
	return l, nil
}

// newRefLedgerFromState rebuilds a ledger from a snapshot, checking it first.
func newRefLedgerFromState(s LedgerState) (*refLedger, error) {
	l := &refLedger{s: cloneState(s)}
	if err := l.s.Config.Validate(); err != nil {
		return nil, err
	}
	if err := l.CheckInvariants(); err != nil {
		return nil, err
	}
	return l, nil
}

// State returns a deep copy of the ledger's state.
func (l *refLedger) State() LedgerState { return cloneState(l.s) }

// Config returns the ledger's budget.
func (l *refLedger) Config() LedgerConfig { return l.s.Config }

// PoolMilli returns the pool level as of the latest operation.
func (l *refLedger) PoolMilli() int64 { return l.s.PoolMilli }

// NowNanos returns the cluster time of the latest operation.
func (l *refLedger) NowNanos() int64 { return l.s.NowNanos }

// Stats returns the token-flow counters.
func (l *refLedger) Stats() LedgerStats { return l.s.Stats }

// Leases returns copies of the live leases, sorted by (ClientID, Incarnation).
func (l *refLedger) Leases() []Lease { return cloneState(l.s).Leases }

// LeaseCount returns the number of live leases.
func (l *refLedger) LeaseCount() int { return len(l.s.Leases) }

// AppendHolders appends to dst the distinct client IDs that hold live
// leases, in order, without copying the leases (the FSM's client index).
func (l *refLedger) AppendHolders(dst []string) []string {
	start := len(dst)
	for i := range l.s.Leases {
		id := l.s.Leases[i].ClientID
		if len(dst) > start && dst[len(dst)-1] == id {
			continue // sorted by (ClientID, Incarnation): a holder's leases are adjacent
		}
		dst = append(dst, id)
	}
	return dst
}

// heldTotal returns Σ held r_i and Σ held b_i at the latest operation's time.
func (l *refLedger) heldTotal() (rateMilliPerSec, capMilli int64) {
	return l.heldExcept(-1, l.s.NowNanos)
}

// PoolFullAt returns the cluster time at which the pool will be full if no
// lease changes before then (math.MaxInt64 if it never fills).
func (l *refLedger) PoolFullAt() int64 {
	if h := l.s.HoldAllUntilNanos; h > l.s.NowNanos {
		// Rule (j): empty and held until h, then minting at no more than r.
		wait := nanosToMintPer(l.s.Config.RateMilliPerSec, l.s.Config.poolPeriod(), l.s.Config.CapacityMilli-l.s.PoolMilli)
		if wait == int64(RetryNever) {
			return math.MaxInt64
		}
		return satAdd(h, wait)
	}
	rate, capMilli := l.poolTerms(l.s.NowNanos)
	if l.s.PoolMilli >= capMilli {
		return l.s.NowNanos
	}
	wait := nanosToMintPer(rate, l.s.Config.poolPeriod(), capMilli-l.s.PoolMilli)
	if wait == int64(RetryNever) {
		return math.MaxInt64
	}
	return max(l.s.NowNanos, satAdd(l.s.PoolNanos, wait))
}

// NextExpiry returns the earliest time a live lease can be removed (its
// current expiry, or a later one of its replaced leases' terms): the
// cluster time at which the leader should propose Expire.
func (l *refLedger) NextExpiry() (int64, bool) {
	var next int64
	found := false
	for i := range l.s.Leases {
		e := l.s.Leases[i].holdUntil()
		if !found || e < next {
			next, found = e, true
		}
	}
	return next, found
}

// heldExcept sums the held terms of every lease except lease skip's own
// (its current and superseded versions); skip's replaced leases' terms are
// counted, since terms(skip) must fit beside them. skip -1 counts all.
func (l *refLedger) heldExcept(skip int, nowNanos int64) (rate, capMilli int64) {
	if nowNanos < l.s.HoldAllUntilNanos {
		// Rule (j): unknown leases may hold all of it.
		rate, capMilli = l.s.Config.RateMilliPerSec, l.s.Config.CapacityMilli
	}
	for i := range l.s.Leases {
		if i == skip {
			r, c := l.s.Leases[i].replacedAt(nowNanos)
			rate, capMilli = satAdd(rate, r), satAdd(capMilli, c)
			continue
		}
		r, c := l.s.Leases[i].heldAt(nowNanos)
		// Saturating: a corrupt snapshot must fail the invariants, not wrap.
		rate = satAdd(rate, max(r, 0))
		capMilli = satAdd(capMilli, max(c, 0))
	}
	return rate, capMilli
}

func (l *refLedger) poolTerms(nowNanos int64) (rate, capMilli int64) {
	hr, hc := l.heldExcept(-1, nowNanos)
	// After a Reconfigure lowers the budget, leases granted under the old one
	// can hold more than the new budget until they expire; the pool then
	// mints nothing and holds nothing.
	// The rate is minted over poolPeriod, the rate period stretched by
	// (1+ρ): the drift factor applies to time, so nothing is rounded off
	// the rate.
	return max(0, l.s.Config.RateMilliPerSec-hr), max(0, l.s.Config.CapacityMilli-hc)
}

// advance moves the ledger to nowNanos, minting into the pool piece by piece:
// the held totals change only at operations and at superseded versions'
// expiries, so the pool mints at a constant rate between those points (rule g).
func (l *refLedger) advance(nowNanos int64) error {
	if nowNanos < l.s.NowNanos {
		return fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, l.s.NowNanos)
	}
	if err := checkTime(nowNanos); err != nil {
		return err
	}
	var breaks []int64
	if h := l.s.HoldAllUntilNanos; h > l.s.NowNanos && h <= nowNanos {
		breaks = append(breaks, h) // the pool starts minting here
	}
	for i := range l.s.Leases {
		for _, ss := range [][]Share{l.s.Leases[i].Superseded, l.s.Leases[i].Replaced} {
			for _, s := range ss {
				if s.ExpiresNanos > l.s.NowNanos && s.ExpiresNanos <= nowNanos {
					breaks = append(breaks, s.ExpiresNanos)
				}
			}
		}
	}
	sort.Slice(breaks, func(a, b int) bool { return breaks[a] < breaks[b] })
	breaks = append(breaks, nowNanos)
	for _, t := range breaks {
		rate, capMilli := l.poolTerms(l.s.NowNanos)
		l.mintTo(t, rate, capMilli)
		l.s.NowNanos = t
		l.repricePool()
	}
	for i := range l.s.Leases {
		l.s.Leases[i].Superseded = refPruneShares(l.s.Leases[i].Superseded, l.s.Leases[i].Current, nowNanos)
		l.s.Leases[i].Replaced = refPruneExpired(l.s.Leases[i].Replaced, nowNanos)
	}
	return nil
}

// refPruneExpired drops the replaced terms that have expired. (Unlike
// superseded versions, none is ever dominated: they are summed.)
func refPruneExpired(ss []Share, nowNanos int64) []Share {
	out := ss[:0]
	for _, s := range ss {
		if s.ExpiresNanos > nowNanos {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// refReplacedTerms is what a grant replacing old at now keeps held (rule h):
// old's live replaced entries, plus old's own held terms until its expiry
// if it is still live. Over maxReplaced entries, the oldest two merge.
func refReplacedTerms(old *Lease, nowNanos int64) []Share {
	out := append([]Share(nil), refPruneExpired(append([]Share(nil), old.Replaced...), nowNanos)...)
	if old.Current.ExpiresNanos > nowNanos {
		if r, c := old.ownHeldAt(nowNanos); r > 0 || c > 0 {
			out = append(out, Share{RateMilliPerSec: r, CapMilli: c, ExpiresNanos: old.Current.ExpiresNanos})
		}
	}
	for len(out) > maxReplaced {
		a, b := out[0], out[1]
		merged := Share{RateMilliPerSec: satAdd(a.RateMilliPerSec, b.RateMilliPerSec), CapMilli: satAdd(a.CapMilli, b.CapMilli),
			ExpiresNanos: max(a.ExpiresNanos, b.ExpiresNanos)}
		out = append([]Share{merged}, out[2:]...)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (l *refLedger) mintTo(t, rate, capMilli int64) {
	before := l.s.PoolMilli
	if before > capMilli {
		// Cannot happen while the invariants hold; never mint over the cap.
		capMilli = before
	}
	l.s.PoolMilli, l.s.PoolNanos = refill(l.s.PoolMilli, l.s.PoolNanos, t, rate, l.s.Config.poolPeriod(), capMilli)
	l.s.Stats.MintedMilli += l.s.PoolMilli - before
}

// repricePool records the pool's mint rate after a change of the held
// totals. The time not yet minted is carried forward only if the rate did not
// rise; otherwise that fraction would be minted at the higher rate, so it is
// dropped (at most one milli-token, always toward fewer tokens).
func (l *refLedger) repricePool() {
	rate, _ := l.poolTerms(l.s.NowNanos)
	if rate > l.s.PoolRateMilliPerSec {
		l.s.PoolNanos = l.s.NowNanos
	}
	l.s.PoolRateMilliPerSec = rate
}

// refPruneShares drops superseded versions that have expired or that the
// current terms dominate (they can no longer raise the held maximum).
func refPruneShares(ss []Share, cur Share, nowNanos int64) []Share {
	out := ss[:0]
	for _, s := range ss {
		if s.ExpiresNanos <= nowNanos {
			continue
		}
		if s.RateMilliPerSec <= cur.RateMilliPerSec && s.CapMilli <= cur.CapMilli {
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// capPool enforces pool <= B - Σ held b_i by burning the excess (the pool's
// capacity shrank because a lease's cap grew); it returns what it burned.
func (l *refLedger) capPool() int64 {
	_, capMilli := l.poolTerms(l.s.NowNanos)
	if l.s.PoolMilli <= capMilli {
		return 0
	}
	burned := l.s.PoolMilli - capMilli
	l.s.PoolMilli = capMilli
	l.s.Stats.BurnedMilli += burned
	return burned
}

func (l *refLedger) find(clientID string, incarnation uint64) (int, bool) {
	i := sort.Search(len(l.s.Leases), func(i int) bool {
		le := &l.s.Leases[i]
		return le.ClientID > clientID || (le.ClientID == clientID && le.Incarnation >= incarnation)
	})
	ok := i < len(l.s.Leases) && l.s.Leases[i].ClientID == clientID && l.s.Leases[i].Incarnation == incarnation
	return i, ok
}

// terms computes the rate and cap for lease index i (which must already
// carry its fresh demands): refDivideBudget over every live lease's demands,
// limited by what the other leases hold now. While others hold part of the
// budget, a cap below the lease's floor (capFloor: its largest recent cost)
// would admit nothing it is asked for and keep that much from everyone
// else, so the lease gets no cap and no rate instead, and asks again at its
// next renewal.
func (l *refLedger) terms(i int, leftoverBurst bool) (rate, capMilli int64, err error) {
	if l.fault == faultLeftoverBurstToPool {
		leftoverBurst = false
	}
	cfg := l.s.Config
	claims := make([]budgetClaim, len(l.s.Leases))
	// Leases are sorted by holder, so slice order is the deterministic
	// tie-break the division needs; no IDs are built on this hot path.
	for j := range l.s.Leases {
		le := &l.s.Leases[j]
		c := budgetClaim{Weight: le.Weight, RateMilliPerSec: le.DemandRateMilliPerSec, BurstMilli: le.DemandBurstMilli, MaxCostMilli: le.DemandMaxCostMilli}
		if cfg.RatePeriodNanos != 0 {
			// Demands are per second; the budget's rates per its period.
			c.RateMilliPerSec = MulDiv(c.RateMilliPerSec, cfg.RatePeriodNanos, NanosPerSecond)
		}
		c.Incumbent = le.Current.CapMilli > 0 && le.Current.CapMilli >= capFloor(c, cfg.CapacityMilli)
		claims[j] = c
	}
	var rs, bs []int64
	if l.fault == faultSliverShares {
		rs, bs, err = refFairSharesOnly(cfg, claims)
	} else {
		rs, bs, err = refDivideBudgetWith(cfg.RateMilliPerSec, cfg.CapacityMilli, claims, leftoverBurst)
	}
	if err != nil {
		return 0, 0, err
	}
	otherRate, otherCap := l.heldExcept(i, l.s.NowNanos)
	rate = max(0, min(rs[i], cfg.RateMilliPerSec-otherRate))
	capMilli = max(0, min(bs[i], cfg.CapacityMilli-otherCap))
	if l.fault == faultFloorOverHeld {
		// The deliberate bug: a floor granted on top of what others hold.
		capMilli = max(capMilli, capFloor(claims[i], cfg.CapacityMilli))
	}
	if l.fault != faultSliverShares && otherCap > 0 && capMilli < capFloor(claims[i], cfg.CapacityMilli) {
		return 0, 0, nil
	}
	return rate, capMilli, nil
}

// refFairSharesOnly is the division before floors and leftovers (plain
// weighted max-min fair shares of the demands), for faultSliverShares.
func refFairSharesOnly(cfg LedgerConfig, cs []budgetClaim) (rates, caps []int64, err error) {
	rc := make([]fairClaim, len(cs))
	bc := make([]fairClaim, len(cs))
	for j, c := range cs {
		rc[j] = fairClaim{Demand: min(c.RateMilliPerSec, cfg.RateMilliPerSec), Weight: c.Weight}
		bc[j] = fairClaim{Demand: min(c.BurstMilli, cfg.CapacityMilli), Weight: c.Weight}
	}
	if rates, err = refFairShares(cfg.RateMilliPerSec, rc); err != nil {
		return nil, nil, err
	}
	caps, err = refFairShares(cfg.CapacityMilli, bc)
	return rates, caps, err
}

// Grant creates a lease for (ClientID, Incarnation) at cluster time now.
//
// If that holder already has a lease, the new grant replaces it, without
// credit, and keeps the replaced lease's held terms held until its expiry
// (rule h, in Lease.Replaced), counted in full beside the new lease's. A
// well-behaved client asks for a grant only when it holds no usable lease
// on the key, but a process with two users of one holder (two limiters
// the client did not know share a budget) may still admit from the
// replaced bucket: holding its terms keeps the bound even then.
func (l *refLedger) Grant(nowNanos int64, req GrantRequest) (Grant, error) {
	if err := validateHolder(req.ClientID, req.TTLNanos); err != nil {
		return Grant{}, err
	}
	if err := validateDemand(req.Weight, req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli); err != nil {
		return Grant{}, err
	}
	if nowNanos < l.s.NowNanos {
		return Grant{}, fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, l.s.NowNanos)
	}
	i, exists := l.find(req.ClientID, req.Incarnation)
	if exists && req.Seq <= l.s.Leases[i].GrantSeq {
		return Grant{}, fmt.Errorf("%w: %s incarnation %d sent grant %d after grant %d", ErrStaleGrant, req.ClientID, req.Incarnation, req.Seq, l.s.Leases[i].GrantSeq)
	}
	if !exists && len(l.s.Leases) >= l.s.Config.maxLeases() {
		return Grant{}, fmt.Errorf("%w: %d leases", ErrTooManyLeases, len(l.s.Leases))
	}
	if err := l.advance(nowNanos); err != nil {
		return Grant{}, err
	}
	le := Lease{
		ID: LeaseID(l.s.NextID), ClientID: req.ClientID, Incarnation: req.Incarnation, GrantSeq: req.Seq, Weight: req.Weight,
		DemandRateMilliPerSec: req.DemandRateMilliPerSec, DemandBurstMilli: req.DemandBurstMilli,
		DemandMaxCostMilli: req.DemandMaxCostMilli,
	}
	var replaced Lease
	if exists {
		replaced = l.s.Leases[i]
		if l.fault != FaultForgetReplaced {
			le.Replaced = refReplacedTerms(&replaced, nowNanos)
		}
		l.s.Leases[i] = le
	} else {
		l.s.Leases = append(l.s.Leases, Lease{})
		copy(l.s.Leases[i+1:], l.s.Leases[i:])
		l.s.Leases[i] = le
	}
	rate, capMilli, err := l.terms(i, req.LeftoverBurst)
	if err != nil {
		// Unreachable (inputs were validated); undo the insertion anyway so
		// a failed grant leaves no half-made lease behind.
		if exists {
			l.s.Leases[i] = replaced
		} else {
			l.s.Leases = append(l.s.Leases[:i], l.s.Leases[i+1:]...)
		}
		return Grant{}, err
	}
	l.s.NextID++
	cur := &l.s.Leases[i]
	cur.Current = Share{RateMilliPerSec: rate, CapMilli: capMilli, ExpiresNanos: nowNanos + req.TTLNanos, Version: 1}
	// Rule (c): the bucket's starting tokens come out of the pool.
	start := min(capMilli, l.s.PoolMilli)
	var burned int64
	if l.fault == FaultStartFullNoDebit {
		start = capMilli // the deliberate bug: tokens from nowhere
	} else {
		l.s.PoolMilli -= start
		l.s.Stats.DebitedMilli += start
		burned = l.capPool()
	}
	cur.StartMilli = start
	if exists {
		l.markOvercommit(l.s.Config)
	}
	l.repricePool()
	return Grant{
		LeaseID: cur.ID, RateMilliPerSec: rate, CapMilli: capMilli, StartMilli: start,
		ExpiresNanos: cur.Current.ExpiresNanos, TTLNanos: req.TTLNanos, BurnedMilli: burned,
		Version: cur.Current.Version,
	}, nil
}

// Renew extends a live lease and re-divides the budget with its fresh
// demands. A reduced rate or cap keeps the old value held until the old
// expiry or its acknowledgement (rule b, refDropAcknowledged); a renewal never
// adds tokens (rule d). The expiry never moves earlier. The
// new terms get the next version and the answer says whether the key's
// shares are still converging (Grant.RenewSoon).
func (l *refLedger) Renew(nowNanos int64, req RenewRequest) (Grant, error) {
	if err := validateHolder(req.ClientID, req.TTLNanos); err != nil {
		return Grant{}, err
	}
	if err := validateDemand(req.Weight, req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli); err != nil {
		return Grant{}, err
	}
	if req.ClampedMilli < 0 || req.ClampedMilli > MaxCapacityMilli {
		return Grant{}, fmt.Errorf("%w: clamped %d milli-tokens is outside [0, %d]", ErrInvalidRequest, req.ClampedMilli, int64(MaxCapacityMilli))
	}
	if nowNanos < l.s.NowNanos {
		return Grant{}, fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, l.s.NowNanos)
	}
	i, ok := l.find(req.ClientID, req.Incarnation)
	if !ok || l.s.Leases[i].ID != req.LeaseID {
		if req.LeaseID > 0 && req.LeaseID < LeaseID(l.s.NextID) {
			// It existed: expired (and removed), released or replaced.
			return Grant{}, fmt.Errorf("%w: lease %d of %s incarnation %d is gone (expired, released or replaced)", ErrLeaseExpired, req.LeaseID, req.ClientID, req.Incarnation)
		}
		return Grant{}, fmt.Errorf("%w: %s incarnation %d lease %d", ErrLeaseNotFound, req.ClientID, req.Incarnation, req.LeaseID)
	}
	if err := checkTime(nowNanos); err != nil {
		return Grant{}, err
	}
	if l.s.Leases[i].Current.ExpiresNanos <= nowNanos {
		return Grant{}, fmt.Errorf("%w: lease %d expired at %d ns, now %d ns", ErrLeaseExpired, req.LeaseID, l.s.Leases[i].Current.ExpiresNanos, nowNanos)
	}
	if err := l.advance(nowNanos); err != nil {
		return Grant{}, err
	}
	l.quietAck = req.QuietAck
	cur := &l.s.Leases[i]
	cur.Weight = req.Weight
	cur.DemandRateMilliPerSec = req.DemandRateMilliPerSec
	cur.DemandBurstMilli = req.DemandBurstMilli
	cur.DemandMaxCostMilli = req.DemandMaxCostMilli
	rate, capMilli, err := l.terms(i, req.LeftoverBurst)
	if err != nil {
		return Grant{}, err
	}
	old := cur.Current
	if l.fault != faultForgetSuperseded {
		cur.Superseded = append(cur.Superseded, old)
	}
	cur.Current = Share{RateMilliPerSec: rate, CapMilli: capMilli, ExpiresNanos: max(old.ExpiresNanos, nowNanos+req.TTLNanos)}
	var returned int64
	cur.Current.Version = old.Version + 1
	// The client may have installed only a version that was granted: an
	// acknowledgement above the latest one is ignored.
	if req.AckedVersion <= old.Version {
		if l.fault != FaultCreditAtReduction {
			returned = l.returnClamped(append([]Share{old}, cur.Superseded...), req.AckedVersion, req.ClampedMilli)
		}
		cur.Superseded = refDropAcknowledged(cur.Superseded, req.AckedVersion, l.fault)
	}
	if l.fault == FaultCreditAtReduction && capMilli < old.CapMilli {
		// The deliberate bug: the cut is credited before the client has
		// clamped its bucket (it still holds those tokens).
		returned = old.CapMilli - capMilli
		l.s.PoolMilli += returned
		l.s.Stats.CreditedMilli += returned
	}
	cur.Superseded = refPruneShares(cur.Superseded, cur.Current, nowNanos)
	var topUp int64
	if capMilli > old.CapMilli {
		// Rule (i): the raise of the cap is room in the client's bucket;
		// fill it from the pool rather than burning what the pool can no
		// longer hold.
		topUp = min(capMilli-old.CapMilli, l.s.PoolMilli)
		if l.fault != faultTopUpNoDebit {
			l.s.PoolMilli -= topUp
			l.s.Stats.DebitedMilli += topUp
		}
	}
	burned := l.capPool()
	l.repricePool()
	return Grant{
		LeaseID: cur.ID, RateMilliPerSec: rate, CapMilli: capMilli,
		ExpiresNanos: cur.Current.ExpiresNanos, TTLNanos: cur.Current.ExpiresNanos - nowNanos, BurnedMilli: burned,
		Version: cur.Current.Version, AckSoon: l.holdsSuperseded(i), RenewSoon: l.converging(i),
		TopUpMilli: topUp, returnedMilli: returned,
	}, nil
}

// returnClamped credits the pool with the tokens the client reports its
// bucket lost when it installed version acked (rule i), and returns what it
// credited. The client clamped its level from the cap of a version older
// than acked down to acked's cap, so the credit is at most the largest cap
// an older held version has above acked's. Those older versions are
// dropped by this same commit (refDropAcknowledged), which is what makes the
// credit happen once per version: a duplicated or retried renewal, or a
// delayed one carrying an older acknowledgement, finds no older version
// held and credits nothing. A version no longer held (expired, or acked's
// own terms gone) credits nothing either. versions is the lease's terms
// before this renewal: the latest first, then the superseded ones.
func (l *refLedger) returnClamped(versions []Share, acked uint64, clampedMilli int64) int64 {
	if clampedMilli <= 0 || acked == 0 {
		return 0
	}
	ackedCap, olderCap := int64(-1), int64(-1)
	for _, s := range versions {
		switch {
		case s.Version == acked:
			ackedCap = s.CapMilli
		case s.Version != 0 && s.Version < acked:
			olderCap = max(olderCap, s.CapMilli)
		}
	}
	credit := int64(0)
	if ackedCap >= 0 && olderCap > ackedCap {
		credit = min(clampedMilli, olderCap-ackedCap)
	}
	l.s.PoolMilli += credit
	l.s.Stats.CreditedMilli += credit
	return credit
}

// refDropAcknowledged drops the superseded versions a renewal acknowledging
// version acked frees: those strictly older than acked. The client
// installed version acked (applied its rate and cap to its bucket) before
// it sent the renewal, so from then on it mints and stores within acked's
// terms and never again under an older version; the renewal commits after
// that, so the older versions were held for as long as they were used. The
// acknowledged version itself stays held (the client uses it until it
// installs this renewal's answer), and so does every newer one (a delayed
// renewal carries an old acknowledgement: the client may be using a
// version granted since). Unversioned (0) terms are never dropped early.
func refDropAcknowledged(ss []Share, acked uint64, fault Fault) []Share {
	if acked == 0 {
		return ss
	}
	out := ss[:0]
	for _, s := range ss {
		drop := s.Version != 0 && s.Version < acked
		switch fault {
		case faultAckDropsAcked:
			drop = s.Version != 0 && s.Version <= acked // the deliberate bug: the version in use
		case faultAckDropsNewer:
			drop = s.Version != 0 && s.Version != acked // the deliberate bug: versions granted since
		}
		if !drop {
			out = append(out, s)
		}
	}
	return out
}

// holdsSuperseded reports whether lease i holds a versioned superseded
// version (after pruning: above its current terms, not expired), which an
// acknowledgement of its current terms would free (Grant.AckSoon).
func (l *refLedger) holdsSuperseded(i int) bool {
	le := &l.s.Leases[i]
	for _, s := range le.Superseded {
		if s.Version != 0 && (!l.quietAck || worthAcking(l.s.Config, s, le.Current)) {
			return true
		}
	}
	return false
}

// converging reports whether lease i should renew early because the key's
// shares are still moving around it (Grant.RenewSoon):
//   - another lease holds a versioned superseded version and lease i gets
//     less than it asks for: it waits for that share;
//   - its rate is below its weighted equal split of r (capped by its
//     demand), a lower bound of its max-min fair share, by more than 1/32:
//     others hold more than their fair shares until they renew.
//
// Neither holds, nor holdsSuperseded, once every lease holds its fair
// share and has acknowledged it, so a steady state renews at the policy's
// normal interval.
func (l *refLedger) converging(i int) bool {
	cfg := l.s.Config
	me := &l.s.Leases[i]
	wantRate := min(me.DemandRateMilliPerSec, cfg.RateMilliPerSec)
	wantCap := min(me.DemandBurstMilli, cfg.CapacityMilli)
	short := me.Current.RateMilliPerSec < wantRate || me.Current.CapMilli < wantCap
	var sumW int64
	for j := range l.s.Leases {
		le := &l.s.Leases[j]
		sumW += max(le.Weight, 1)
		if j == i || !short {
			continue
		}
		if l.holdsSuperseded(j) {
			return true
		}
	}
	floor := min(wantRate, MulDiv(cfg.RateMilliPerSec, max(me.Weight, 1), sumW))
	return me.Current.RateMilliPerSec < floor-floor/32
}

// Release ends a lease whose client has stopped admitting from it. It credits
// back min(unspent, b_i) and frees the lease's rate and cap at once (rule e).
func (l *refLedger) Release(nowNanos int64, req ReleaseRequest) (ReleaseResult, error) {
	if req.ClientID == "" {
		return ReleaseResult{}, fmt.Errorf("%w: client ID is empty", ErrInvalidRequest)
	}
	if req.UnspentMilli < 0 {
		return ReleaseResult{}, fmt.Errorf("%w: unspent %d is negative", ErrInvalidRequest, req.UnspentMilli)
	}
	if nowNanos < l.s.NowNanos {
		return ReleaseResult{}, fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, l.s.NowNanos)
	}
	i, ok := l.find(req.ClientID, req.Incarnation)
	if !ok || l.s.Leases[i].ID != req.LeaseID {
		return ReleaseResult{}, fmt.Errorf("%w: %s incarnation %d lease %d", ErrLeaseNotFound, req.ClientID, req.Incarnation, req.LeaseID)
	}
	if err := l.advance(nowNanos); err != nil {
		return ReleaseResult{}, err
	}
	credit := min(req.UnspentMilli, l.s.Leases[i].Current.CapMilli)
	if le := &l.s.Leases[i]; len(le.Replaced) > 0 && l.fault != FaultForgetReplaced {
		// Rule (h) outlives the release: the replaced buckets may still be
		// in use. The lease stays as a placeholder holding only them, under
		// a fresh ID nobody holds (so it cannot be renewed or released),
		// until Expire removes it at their expiry.
		le.ID = l.s.NextID
		l.s.NextID++
		until := int64(0)
		for _, r := range le.Replaced {
			until = max(until, r.ExpiresNanos)
		}
		le.Current = Share{ExpiresNanos: until}
		le.Superseded = nil
		le.DemandRateMilliPerSec, le.DemandBurstMilli, le.StartMilli = 0, 0, 0
	} else {
		l.s.Leases = append(l.s.Leases[:i], l.s.Leases[i+1:]...)
	}
	l.s.PoolMilli += credit
	l.s.Stats.CreditedMilli += credit
	// The pool's capacity grew by at least the freed cap, so this burns
	// nothing while the invariants hold; it is the guard if they did not.
	l.capPool()
	l.repricePool()
	return ReleaseResult{CreditedMilli: credit}, nil
}

// Expire removes every lease whose current expiry is at or before now,
// freeing its rate and cap without returning tokens (rule f). It returns the
// removed IDs in holder order.
func (l *refLedger) Expire(nowNanos int64) ([]LeaseID, error) {
	return l.ExpireThrough(nowNanos, nowNanos)
}

// ExpireThrough advances to now but removes only leases whose expiry is at
// or before throughNanos (<= now): a new leader expires inherited leases a
// margin late, in case its clock runs faster than the old leader's did.
func (l *refLedger) ExpireThrough(nowNanos, throughNanos int64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	throughNanos = min(throughNanos, nowNanos)
	// A lease whose replaced leases' terms outlive its own (the lease
	// duration shrank) stays, holding them, until they expire too.
	return l.removeLeases(func(le *Lease) bool { return le.holdUntil() <= throughNanos }), nil
}

// removeLeases frees, without credit, every lease gone says to, keeping
// the holder order, and returns their IDs (Expire and Revoke).
func (l *refLedger) removeLeases(gone func(*Lease) bool) []LeaseID {
	var ids []LeaseID
	kept := l.s.Leases[:0]
	for i := range l.s.Leases {
		if gone(&l.s.Leases[i]) {
			ids = append(ids, l.s.Leases[i].ID)
			continue
		}
		kept = append(kept, l.s.Leases[i])
	}
	l.s.Leases = kept
	l.repricePool()
	return ids
}

// overcommitted reports whether leases granted under a budget larger than
// the current one may still be held: before OvercommitUntilNanos, or while
// a lease that expired by then has not been removed by Expire yet.
func (l *refLedger) overcommitted() bool {
	s := &l.s
	if s.HoldAllUntilNanos > s.NowNanos {
		return true // rule (j): the restored leases beside the whole budget held
	}
	if s.OvercommitUntilNanos == 0 {
		return false
	}
	if s.OvercommitUntilNanos > s.NowNanos {
		return true
	}
	for i := range s.Leases {
		if s.Leases[i].holdUntil() <= s.OvercommitUntilNanos {
			return true
		}
	}
	return false
}

// markOvercommit records, when the leases hold more than cfg's budget,
// that rule (a) holds only against the budget they were granted under
// until the last of them has expired (OvercommitUntilNanos). Reconfigure
// lowers the budget under held terms; a grant can carry a replaced
// lease's terms held past a reduction that was waiting for their expiry
// (refReplacedTerms keeps the largest version until the latest expiry).
func (l *refLedger) markOvercommit(cfg LedgerConfig) {
	hr, hc := l.heldExcept(-1, l.s.NowNanos)
	if hr <= cfg.RateMilliPerSec && hc <= cfg.CapacityMilli {
		return
	}
	for i := range l.s.Leases {
		l.s.OvercommitUntilNanos = max(l.s.OvercommitUntilNanos, l.s.Leases[i].holdUntil())
	}
}

// Reconfigure changes the budget at cluster time now (a policy update).
// Leases already granted keep their terms until they are renewed or expire:
// held capacity is honoured, so if the budget shrank, the old budget bounds
// admissions until the last old lease expires. New grants and renewals are
// divided under the new budget at once, and the pool is burned down to
// whatever room the new budget leaves.
func (l *refLedger) Reconfigure(nowNanos int64, cfg LedgerConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.StartFull = l.s.Config.StartFull
	if oldP, newP := l.s.Config.RatePeriod(), cfg.RatePeriod(); oldP != newP {
		for i := range l.s.Leases {
			if r, _ := l.s.Leases[i].heldAt(math.MinInt64); ceilMulDiv(r, newP, oldP) > MaxRateMilliPerSec {
				return fmt.Errorf("%w: lease %d's rate %d per %d ns cannot be restated per %d ns", ErrInvalidConfig, l.s.Leases[i].ID, r, oldP, newP)
			}
		}
	}
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	if oldP, newP := l.s.Config.RatePeriod(), cfg.RatePeriod(); oldP != newP {
		// The rates' unit changes (a rate per minute becomes one per
		// second, say): restate every lease's terms in the new unit,
		// rounding up, so the held terms still cover what clients mint
		// under the old ones; drop the pool's carried fraction.
		for i := range l.s.Leases {
			le := &l.s.Leases[i]
			le.Current.RateMilliPerSec = ceilMulDiv(le.Current.RateMilliPerSec, newP, oldP)
			for j := range le.Superseded {
				le.Superseded[j].RateMilliPerSec = ceilMulDiv(le.Superseded[j].RateMilliPerSec, newP, oldP)
			}
			for j := range le.Replaced {
				le.Replaced[j].RateMilliPerSec = ceilMulDiv(le.Replaced[j].RateMilliPerSec, newP, oldP)
			}
		}
		l.s.PoolNanos = nowNanos
	}
	l.markOvercommit(cfg)
	l.s.Config = cfg
	l.capPool()
	l.repricePool()
	return nil
}

// RaiseNextID makes the next lease ID at least min: after a snapshot
// restore, IDs must not be reused, or a delayed release or renewal of a
// lease granted after the snapshot could end a new lease of the same
// holder that got its ID.
func (l *refLedger) RaiseNextID(min LeaseID) {
	l.s.NextID = max(l.s.NextID, min)
}

// HoldAll applies rule (j) at cluster time now: until untilNanos the whole
// budget counts as held (by leases this ledger does not know: a snapshot
// restore replaced the state that granted them), so grants and renewals get
// no rate and no cap; the pool is emptied (its tokens burned: the lost
// state may have handed them out) and mints nothing until then. A later
// call can only extend the hold.
func (l *refLedger) HoldAll(nowNanos, untilNanos int64) error {
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	if err := checkTime(untilNanos); err != nil {
		return err
	}
	l.s.Stats.BurnedMilli += l.s.PoolMilli
	l.s.PoolMilli = 0
	l.s.HoldAllUntilNanos = max(l.s.HoldAllUntilNanos, untilNanos)
	l.repricePool()
	return nil
}

// Revoke frees, without credit, every lease of clientID whose incarnation is
// below incarnation: a client that restarted with a new incarnation tells
// the coordinator its previous process is gone. It returns the freed IDs.
func (l *refLedger) Revoke(nowNanos int64, clientID string, incarnation uint64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	return l.removeLeases(func(le *Lease) bool { return le.ClientID == clientID && le.Incarnation < incarnation }), nil
}

// CheckInvariants verifies rules (a) and the structural invariants at the
// latest operation's time. It returns nil for every reachable state.
func (l *refLedger) CheckInvariants() error {
	s := &l.s
	cfg := s.Config
	if s.PoolNanos > s.NowNanos {
		return fmt.Errorf("pool credited to %d, after now %d", s.PoolNanos, s.NowNanos)
	}
	hr, hc := l.heldExcept(-1, s.NowNanos)
	if l.overcommitted() {
		// Leases from before a Reconfigure are honoured until they expire;
		// rule (a) holds against the budget they were granted under.
		return l.checkLeases()
	}
	if hr > cfg.RateMilliPerSec {
		return fmt.Errorf("rule (a): held rate %d exceeds r %d", hr, cfg.RateMilliPerSec)
	}
	if s.PoolMilli+hc > cfg.CapacityMilli {
		return fmt.Errorf("rule (a): pool %d + held caps %d exceeds B %d", s.PoolMilli, hc, cfg.CapacityMilli)
	}
	return l.checkLeases()
}

func (l *refLedger) checkLeases() error {
	s := &l.s
	if s.PoolMilli < 0 {
		return fmt.Errorf("pool %d is negative", s.PoolMilli)
	}
	for i := range s.Leases {
		le := &s.Leases[i]
		if i > 0 {
			p := &s.Leases[i-1]
			if p.ClientID > le.ClientID || (p.ClientID == le.ClientID && p.Incarnation >= le.Incarnation) {
				return fmt.Errorf("leases out of order at %d", i)
			}
		}
		if le.ID == 0 || le.ID >= s.NextID {
			return fmt.Errorf("lease %d has an ID outside [1, %d)", le.ID, s.NextID)
		}
		for _, sh := range append(append([]Share{le.Current}, le.Superseded...), le.Replaced...) {
			if sh.RateMilliPerSec < 0 || sh.RateMilliPerSec > MaxRateMilliPerSec || sh.CapMilli < 0 || sh.CapMilli > MaxCapacityMilli {
				return fmt.Errorf("lease %d has terms outside the supported ranges: %+v", le.ID, sh)
			}
		}
		if len(le.Replaced) > maxReplaced {
			return fmt.Errorf("lease %d holds %d replaced leases' terms, more than %d", le.ID, len(le.Replaced), maxReplaced)
		}
		for _, sh := range le.Superseded {
			if sh.ExpiresNanos > le.Current.ExpiresNanos {
				return fmt.Errorf("lease %d has a superseded version outliving the current one", le.ID)
			}
		}
	}
	st := s.Stats
	if want := s.InitialPoolMilli + st.MintedMilli - st.DebitedMilli + st.CreditedMilli - st.BurnedMilli; want != s.PoolMilli {
		return fmt.Errorf("conservation: pool %d, flows say %d", s.PoolMilli, want)
	}
	return nil
}

// refFairShares divides total among claims by weighted max-min fairness using
// iterative water-filling: every round gives each unsatisfied claim the same
// amount per unit of weight; claims whose demand fits under that level are
// satisfied exactly and leave, and their unused share is redistributed to the
// rest. The loop ends when no claim leaves in a round, so it takes at most
// len(claims)+1 rounds, never a fixed number.
//
// The result is integer-exact: shares[i] <= claims[i].Demand; the sum is
// min(total, sum of demands); and the integer remainder is handed out one
// unit at a time to the largest fractional parts (ties by ID).
// shares[i] corresponds to claims[i].
// Each share is within one unit of the exact rational max-min share.
func refFairShares(total int64, claims []fairClaim) ([]int64, error) {
	if total < 0 {
		return nil, fmt.Errorf("%w: fair-share total %d is negative", ErrInvalidConfig, total)
	}
	shares := make([]int64, len(claims))
	active := make([]int, 0, len(claims))
	for i, c := range claims {
		if c.Demand < 0 {
			return nil, fmt.Errorf("%w: claim %q demand %d is negative", ErrInvalidConfig, c.ID, c.Demand)
		}
		if c.Weight < 0 || c.Weight > 1<<20 {
			return nil, fmt.Errorf("%w: claim %q weight %d is outside [0, %d]", ErrInvalidConfig, c.ID, c.Weight, 1<<20)
		}
		if c.Demand > 0 {
			active = append(active, i)
		}
	}
	weight := func(i int) int64 {
		if claims[i].Weight == 0 {
			return 1
		}
		return claims[i].Weight
	}
	remaining := total
	for len(active) > 0 && remaining > 0 {
		var sumW int64
		for _, i := range active {
			sumW += weight(i)
		}
		// A claim is satisfied this round iff demand <= weight*remaining/sumW
		// (exact rational comparison: demand*sumW <= weight*remaining, in
		// 128 bits).
		next := active[:0:0]
		satisfied := false
		for _, i := range active {
			if mulLE(claims[i].Demand, sumW, weight(i), remaining) {
				shares[i] = claims[i].Demand
				satisfied = true
			} else {
				next = append(next, i)
			}
		}
		if satisfied {
			for _, i := range active {
				if shares[i] == claims[i].Demand {
					remaining -= shares[i]
				}
			}
			active = next
			continue
		}
		// Nobody fits under the water level: each claim gets the floor of
		// its exact share w_i*remaining/sumW, and the leftover (fewer units
		// than active claims) goes one unit each to the largest fractional
		// parts, ties by ID. Every active claim's demand exceeds its exact
		// share, so the extra unit always fits under its demand.
		frac := make([]uint64, len(claims))
		given := int64(0)
		for _, i := range active {
			hi, lo := mul128(weight(i), remaining)
			q, r := bits.Div64(hi, lo, uint64(sumW)) // q <= remaining: no overflow
			shares[i] = int64(q)
			frac[i] = r
			given += shares[i]
		}
		leftover := remaining - given
		slices.SortStableFunc(active, func(a, b int) int {
			if fa, fb := frac[a], frac[b]; fa != fb {
				return cmp.Compare(fb, fa)
			}
			return strings.Compare(claims[a].ID, claims[b].ID)
		})
		for _, i := range active {
			if leftover == 0 {
				break
			}
			if shares[i] < claims[i].Demand {
				shares[i]++
				leftover--
			}
		}
		break
	}
	return shares, nil
}

// refDivideBudget divides a key's rate r and burst B among leases' claims.
// It is a pure function of its arguments (so every server computes the same
// division), and Σ rates <= r, Σ caps <= B always.
//
//  1. Weighted max-min fair shares (refFairShares) of r and of B over the
//     demands.
//  2. No slivers: if some demanding claim's fair cap is below its floor
//     (capFloor: B/n smaller than a request), B is instead leased as
//     full-cost caps to a subset. Candidates (claims with a burst demand)
//     are taken in order: incumbents first, then by rate demand, then by
//     burst demand (both descending), then by position; a candidate joins
//     if its floor still fits in what the members' floors leave of B.
//     Members get their floor plus a fair share of the rest of B over their
//     demands above the floor; the rate is divided among members only. The
//     others get nothing (they ask again at each renewal, and get a place as
//     members go idle).
//  3. Whatever of r and B no demand claims (every demand is satisfied) is
//     split by weight among the idle claims (no rate and no burst demand),
//     if there are any; otherwise it stays in the pool, for newcomers'
//     starting tokens. An idle lease thus keeps what nobody else wants: a
//     client coming back after an idle spell finds its bucket refilled to
//     the whole burst, and its first renewal gives the reserve back to
//     the others' demands.
//
// refDivideBudgetWith's leftoverBurst: step 3 for B splits what no demand
// claims among every claim by weight, unless step 2 ran.
func refDivideBudget(rateMilliPerSec, capacityMilli int64, cs []budgetClaim) (rates, caps []int64, err error) {
	return refDivideBudgetWith(rateMilliPerSec, capacityMilli, cs, false)
}

func refDivideBudgetWith(rateMilliPerSec, capacityMilli int64, cs []budgetClaim, leftoverBurst bool) (rates, caps []int64, err error) {
	if rateMilliPerSec < 0 || capacityMilli < 0 {
		return nil, nil, fmt.Errorf("%w: budget rate %d, burst %d must not be negative", ErrInvalidConfig, rateMilliPerSec, capacityMilli)
	}
	n := len(cs)
	rateClaims := make([]fairClaim, n)
	burstClaims := make([]fairClaim, n)
	for j, c := range cs {
		if c.MaxCostMilli < 0 {
			return nil, nil, fmt.Errorf("%w: claim %d max cost %d is negative", ErrInvalidConfig, j, c.MaxCostMilli)
		}
		rateClaims[j] = fairClaim{Demand: min(c.RateMilliPerSec, rateMilliPerSec), Weight: c.Weight}
		burstClaims[j] = fairClaim{Demand: min(c.BurstMilli, capacityMilli), Weight: c.Weight}
	}
	if rates, err = refFairShares(rateMilliPerSec, rateClaims); err != nil {
		return nil, nil, err
	}
	if caps, err = refFairShares(capacityMilli, burstClaims); err != nil {
		return nil, nil, err
	}
	sliver := false
	for j, c := range cs {
		if burstClaims[j].Demand > 0 && caps[j] < capFloor(c, capacityMilli) {
			sliver = true
			break
		}
	}
	if sliver {
		if rates, caps, err = refDivideAmongSubset(rateMilliPerSec, capacityMilli, cs, rateClaims, burstClaims); err != nil {
			return nil, nil, err
		}
	}
	if err := refShareLeftover(rateMilliPerSec, rates, cs, false); err != nil {
		return nil, nil, err
	}
	if err := refShareLeftover(capacityMilli, caps, cs, leftoverBurst && !sliver); err != nil {
		return nil, nil, err
	}
	return rates, caps, nil
}

// refDivideAmongSubset is step 2 of refDivideBudget.
func refDivideAmongSubset(rateMilliPerSec, capacityMilli int64, cs []budgetClaim, rateClaims, burstClaims []fairClaim) (rates, caps []int64, err error) {
	n := len(cs)
	order := make([]int, 0, n)
	for j := range cs {
		if burstClaims[j].Demand > 0 {
			order = append(order, j)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if ia, ib := cs[a].Incumbent, cs[b].Incumbent; ia != ib {
			if ia {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(rateClaims[b].Demand, rateClaims[a].Demand); c != 0 {
			return c
		}
		return cmp.Compare(burstClaims[b].Demand, burstClaims[a].Demand)
	})
	floors := make([]int64, n)
	member := make([]bool, n)
	left := capacityMilli
	for _, j := range order {
		f := capFloor(cs[j], capacityMilli)
		if f <= left {
			member[j], floors[j] = true, f
			left -= f
		}
	}
	extraClaims := make([]fairClaim, n)
	memberRates := make([]fairClaim, n)
	for j := range cs {
		if member[j] {
			extraClaims[j] = fairClaim{Demand: burstClaims[j].Demand - floors[j], Weight: cs[j].Weight}
			memberRates[j] = rateClaims[j]
		}
	}
	extra, err := refFairShares(left, extraClaims)
	if err != nil {
		return nil, nil, err
	}
	caps = make([]int64, n)
	for j := range cs {
		caps[j] = floors[j] + extra[j]
	}
	if rates, err = refFairShares(rateMilliPerSec, memberRates); err != nil {
		return nil, nil, err
	}
	return rates, caps, nil
}

// refShareLeftover is step 3 of refDivideBudget: what of total the shares leave
// is split by weight among the idle claims.
func refShareLeftover(total int64, shares []int64, cs []budgetClaim, all bool) error {
	left := total
	for _, s := range shares {
		left -= s
	}
	if left <= 0 {
		return nil
	}
	isIdle := func(c budgetClaim) bool { return c.RateMilliPerSec == 0 && c.BurstMilli == 0 }
	if all && slices.ContainsFunc(cs, isIdle) {
		all = false // idle holders keep it all, as without the option
	}
	claims := make([]fairClaim, len(cs))
	idle := false
	for j, c := range cs {
		if all || isIdle(c) {
			claims[j] = fairClaim{Demand: left, Weight: c.Weight}
			idle = true
		}
	}
	if !idle {
		return nil
	}
	if all {
		claims = append(claims, fairClaim{Demand: left, Weight: 1}) // the pool's seat
	}
	extra, err := refFairShares(left, claims)
	if err != nil {
		return err
	}
	for j := range shares {
		shares[j] += extra[j]
	}
	return nil
}

// newRefLedgerWithPool returns a ledger whose pool starts with poolMilli
// tokens (clamped to [0, B]) at startNanos, whatever cfg.StartFull says.
// The coordinator starts a re-keyed policy's new keys with it, no fuller
// than the retired budgets of the old keying could be by then
// (docs/design.md §3.5).
func newRefLedgerWithPool(cfg LedgerConfig, startNanos, poolMilli int64) (*refLedger, error) {
	l, err := newRefLedger(cfg, startNanos)
	if err != nil {
		return nil, err
	}
	l.s.PoolMilli = max(0, min(poolMilli, cfg.CapacityMilli))
	l.s.InitialPoolMilli = l.s.PoolMilli
	return l, nil
}
