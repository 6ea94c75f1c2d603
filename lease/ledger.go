package lease

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/ration-dev/ration/internal/limits"
)

// Ledger errors. Like the rest of the package's errors they mean the request
// cannot be applied; the ledger is unchanged when one is returned.
var (
	// ErrLeaseNotFound: no live lease has that holder and ID (it was released,
	// expired, replaced, or never existed).
	ErrLeaseNotFound = errors.New("lease: no such lease")
	// ErrLeaseExpired: the lease's expiry has passed; the client must ask for
	// a new grant.
	ErrLeaseExpired = errors.New("lease: lease has expired")
	// ErrInvalidRequest: a malformed grant, renew or release request.
	ErrInvalidRequest = errors.New("lease: invalid request")
	// ErrStaleGrant: a grant request older than one already applied for the
	// same holder (a delayed retry); applying it would replace a lease the
	// client may be using.
	ErrStaleGrant = errors.New("lease: stale grant request")
	// ErrTooManyLeases: the ledger already holds LedgerConfig.MaxLeases.
	ErrTooManyLeases = errors.New("lease: too many leases for this key")
)

// defaultMaxLeases bounds the leases one key's ledger holds.
const defaultMaxLeases = 4096

// maxLeasesLimit is the largest MaxLeases: with it, sums of per-lease terms
// (each at most MaxRateMilliPerSec or MaxCapacityMilli) fit in int64.
const maxLeasesLimit = 65536

// MaxTTLNanos bounds a lease's duration (one day): long leases keep dead
// clients' capacity idle for that long.
const MaxTTLNanos = 24 * 3600 * NanosPerSecond

// LedgerConfig is the budget of one policy key: a token bucket of rate r and
// burst B that the coordinator leases out in slices.
type LedgerConfig struct {
	RateMilliPerSec int64 // r
	CapacityMilli   int64 // B
	StartFull       bool  // the pool starts with B tokens (else empty)
	MaxLeases       int   // 0 means defaultMaxLeases
	// DriftPPM is ρ, the bound on every clock's rate error, the cluster
	// clock's included. The pool mints (r - Σ held r_i)/(1+ρ) per cluster
	// second, so even a cluster clock running ρ fast mints no more than
	// r - Σ held r_i per real second (docs/design.md §4).
	DriftPPM int64
	// RatePeriodNanos is the period of every rate of this ledger: r, each
	// lease's r_i and the pool's rate are milli-tokens per RatePeriodNanos
	// (0: one second). A policy of one token a minute is r = 1000 per 60 s,
	// exactly. At most maxRatePeriodNanos.
	RatePeriodNanos int64
	// MaxDebtMilli is the key's debt bound, the policy's max_debt
	// (docs/design.md §4.1): charges after the fact (Charge, Settle) may
	// take the key's buckets below zero by at most this much in all,
	// holders' allowances and the key's debt together (rule k). 0, the
	// default, is a bucket that never goes below zero: the ledger then
	// behaves exactly as before debt existed.
	MaxDebtMilli int64
}

// maxRatePeriodNanos bounds a budget's rate period: one day.
const maxRatePeriodNanos = 24 * 3600 * NanosPerSecond

// RatePeriod returns the period of the ledger's rates (one second if unset).
func (c LedgerConfig) RatePeriod() int64 {
	if c.RatePeriodNanos == 0 {
		return NanosPerSecond
	}
	return c.RatePeriodNanos
}

// poolPeriod is the period over which the pool mints its rate: the rate
// period stretched by (1+ρ) (ClientPeriodNanos), so that even a cluster
// clock running ρ fast mints no more than r - Σ held r_i per period of
// real time.
func (c LedgerConfig) poolPeriod() int64 { return ClientPeriodNanos(c.RatePeriod(), c.DriftPPM) }

// Validate reports parameters outside the supported ranges.
func (c LedgerConfig) Validate() error {
	if err := (BucketConfig{CapacityMilli: c.CapacityMilli, RateMilliPerSec: c.RateMilliPerSec}).Validate(); err != nil {
		return err
	}
	if c.RatePeriodNanos < 0 || c.RatePeriodNanos > maxRatePeriodNanos {
		return fmt.Errorf("%w: rate period %d ns is outside [0, %d]", ErrInvalidConfig, c.RatePeriodNanos, maxRatePeriodNanos)
	}
	if err := validateMaxLeases(c.MaxLeases); err != nil {
		return err
	}
	if c.MaxDebtMilli < 0 || c.MaxDebtMilli > MaxCapacityMilli {
		return fmt.Errorf("%w: max debt %d milli-tokens is outside [0, %d]", ErrInvalidConfig, c.MaxDebtMilli, int64(MaxCapacityMilli))
	}
	return validateDrift(c.DriftPPM)
}

func (c LedgerConfig) maxLeases() int { return maxLeasesOr(c.MaxLeases) }

// validateMaxLeases checks a ledger's bound on its leases (any kind).
func validateMaxLeases(n int) error {
	if n < 0 || n > maxLeasesLimit {
		return fmt.Errorf("%w: max leases %d is outside [0, %d]", ErrInvalidConfig, n, maxLeasesLimit)
	}
	return nil
}

// maxLeasesOr is a configured bound on a ledger's leases, defaultMaxLeases
// when unset (0; a window ledger's config also takes a negative one).
func maxLeasesOr(n int) int {
	if n <= 0 {
		return defaultMaxLeases
	}
	return n
}

// LeaseID names one lease for its whole life (renewals keep it). IDs are
// assigned by the ledger in increasing order and never reused.
type LeaseID uint64

// Share is one version of a lease's terms.
type Share struct {
	RateMilliPerSec int64 // r_i: what the client may mint per second
	CapMilli        int64 // b_i: the most its local bucket may hold
	ExpiresNanos    int64 // cluster time at which the coordinator reclaims
	// Version numbers the terms of one lease: 1 at its grant, one more at
	// each renewal. A renewal acknowledges the version its client has
	// installed, and superseded versions strictly older than that are then
	// dropped (see Renew). 0 means unversioned (a state built by hand): an
	// unversioned superseded version is never dropped early.
	Version uint64
}

// Lease is one client incarnation's slice of the budget.
type Lease struct {
	ID          LeaseID
	ClientID    string
	Incarnation uint64
	// GrantSeq is the Seq of the grant request that created the lease.
	GrantSeq uint64
	Weight   int64
	// Demands last reported by the client, used for fair division.
	DemandRateMilliPerSec int64
	DemandBurstMilli      int64
	// DemandMaxCostMilli is the largest single cost the client reported
	// being asked to admit recently (0: unknown). Fair division keeps the
	// lease's cap at least this, or at zero, never a sliver in between,
	// while others hold the budget (see terms).
	DemandMaxCostMilli int64
	// StartMilli is the tokens debited from the pool into the client's
	// bucket when the lease was granted.
	StartMilli int64
	// Current is the latest terms the coordinator granted.
	Current Share
	// Superseded holds earlier terms a renewal reduced. They stay held until
	// their own expiry, because the client may not have heard of the
	// reduction yet (rule b), or until a renewal acknowledging a newer
	// version commits. Ordered by expiry; never longer than a few.
	Superseded []Share
	// Replaced holds the held terms of this holder's earlier leases that a
	// grant replaced while they were live (rule h): each entry is one
	// replaced lease's held rate and cap (the maximum over its versions)
	// until its expiry. They are counted in full, summed with each other
	// and with this lease's own terms, because a replaced bucket may still
	// be in use beside the new one (two users of one holder). At most
	// maxReplaced entries; older ones are merged (summed, later expiry).
	Replaced []Share
	// DebtAllowanceMilli is how far below zero the client's bucket may go
	// (rule k): a charge after the fact that the bucket cannot cover
	// takes it down to -DebtAllowanceMilli at most. Held until the lease
	// ends, when it becomes key debt (the client's debt as its release
	// reports it, or all of it at an expiry, a replacement or a
	// revocation: the ledger cannot know what the holder charged since
	// its last word). 0 unless MaxDebtMilli > 0.
	DebtAllowanceMilli int64
	// DebtPendingMilli is what a renewal took off the allowance (version
	// DebtPendingVersion carried the lower one), still held: the client's
	// bucket may be below the lowered allowance until it installs that
	// version, which lifts its level to it and reports the debt it lifted
	// with the renewal acknowledging the version; that renewal moves the
	// report (at most DebtPendingMilli) into the key's debt and frees the
	// rest (rules b and i for allowances). At most one lowering pends.
	DebtPendingMilli   int64
	DebtPendingVersion uint64
}

// heldDebt is the allowance lease le holds: its current one and what a
// lowering not yet acknowledged took off.
func (le *Lease) heldDebt() int64 { return satAdd(le.DebtAllowanceMilli, le.DebtPendingMilli) }

// maxReplaced bounds Lease.Replaced: a further replacement merges the two
// oldest entries into one (rates and caps summed, the later expiry), which
// holds at least as much for at least as long.
const maxReplaced = 4

// HeldAt returns the rate and cap the ledger counts as in use by this lease
// at cluster time now (see heldAt).
func (l *Lease) HeldAt(nowNanos int64) (rate, capMilli int64) { return l.heldAt(nowNanos) }

// heldAt returns the rate and cap the ledger must treat as in use by this
// lease at time now: its own terms (ownHeldAt) plus its replaced leases'
// (replacedAt).
func (l *Lease) heldAt(nowNanos int64) (rate, capMilli int64) {
	rate, capMilli = l.ownHeldAt(nowNanos)
	rr, rc := l.replacedAt(nowNanos)
	return satAdd(rate, rr), satAdd(capMilli, rc)
}

// ownHeldAt is the maximum over the current terms and every superseded
// version not yet expired. A client uses one version at a time, so the max,
// not the sum, bounds what it can mint and store from this lease.
func (l *Lease) ownHeldAt(nowNanos int64) (rate, capMilli int64) {
	rate, capMilli = l.Current.RateMilliPerSec, l.Current.CapMilli
	for _, s := range l.Superseded {
		if s.ExpiresNanos > nowNanos {
			rate = max(rate, s.RateMilliPerSec)
			capMilli = max(capMilli, s.CapMilli)
		}
	}
	return max(rate, 0), max(capMilli, 0)
}

// replacedAt sums the replaced leases' terms not yet expired (rule h).
func (l *Lease) replacedAt(nowNanos int64) (rate, capMilli int64) {
	for _, s := range l.Replaced {
		if s.ExpiresNanos > nowNanos {
			rate = satAdd(rate, max(s.RateMilliPerSec, 0))
			capMilli = satAdd(capMilli, max(s.CapMilli, 0))
		}
	}
	return rate, capMilli
}

// HoldUntil is the cluster time until which the lease holds anything: its
// current expiry, or a replaced lease's if later. Expire removes it then.
func (l *Lease) HoldUntil() int64 { return l.holdUntil() }

func (l *Lease) holdUntil() int64 { return lastExpiry(l.Replaced, l.Current.ExpiresNanos) }

// LedgerStats counts token flows since the ledger was created. They make
// conservation checkable: pool = initial + minted - debited + credited - burned.
type LedgerStats struct {
	MintedMilli   int64 // minted into the pool
	DebitedMilli  int64 // moved from the pool into leases' buckets (grants, top-ups)
	CreditedMilli int64 // returned to the pool by releases and clamps (rules e, i)
	BurnedMilli   int64 // removed from the pool because its capacity shrank
	// DebtInMilli is what ended leases moved into the key's debt (rule
	// k): reported debts at releases, whole allowances at expiries,
	// replacements and revocations, and the unknown leases' room at a
	// restore's HoldAll. Minting pays the debt before it fills the pool,
	// so pool - debt = initial + minted - debited + credited - burned -
	// DebtInMilli.
	DebtInMilli int64
}

// LedgerState is a ledger's complete state, for snapshots. It holds copies;
// changing it does not change the ledger.
type LedgerState struct {
	Config              LedgerConfig
	PoolMilli           int64
	PoolNanos           int64 // time up to which pool minting has been credited
	NowNanos            int64 // cluster time of the latest operation
	NextID              LeaseID
	Leases              []Lease // sorted by (ClientID, Incarnation)
	Stats               LedgerStats
	PoolRateMilliPerSec int64 // pool mint rate at NowNanos, to detect rises
	// OvercommitUntilNanos: after a Reconfigure lowered the budget, leases
	// granted under the old one may exceed it until this time.
	OvercommitUntilNanos int64
	InitialPoolMilli     int64 // pool level at creation, for conservation checks
	// HoldAllUntilNanos: after a snapshot restore (HoldAll), the whole
	// budget counts as held until this time by leases the restored state
	// does not know (rule j): grants and renewals get no rate and no cap,
	// and the pool, emptied, mints nothing until then.
	HoldAllUntilNanos int64
	// DebtMilli is the key's debt (rule k): what leases that ended owed
	// (or may have owed) their buckets. The pool is empty while it is
	// positive, and minting pays it before anything else; it outlives
	// the leases that made it, a restore and a policy's retirement.
	DebtMilli int64
	// DebtCeilingMilli: after a Reconfigure lowered MaxDebtMilli below
	// what is already allowed and owed, the larger total that rule (k)
	// holds against until it has come down (0: none).
	DebtCeilingMilli int64
}

// Ledger is the coordinator's account of one policy key's budget: the pool of
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
//	(k) Debt: Σ held a_i (every lease's allowance, plus what a lowering
//	    not yet acknowledged took off it) + the key's debt <= MaxDebtMilli.
//	    A lowered allowance stays held until the renewal acknowledging it,
//	    which moves the client's reported lifted debt into the key's debt.
//	    When the lease ends its held allowance becomes key debt (its
//	    release's reported debt, at most a_i, plus any pending part; all
//	    of it at an expiry, replacement or revocation). The pool is empty
//	    while the key is in debt, and minting pays the debt first
//	    (docs/design.md §4.1).
type Ledger struct {
	s     LedgerState
	fault Fault
	ix    ledgerIndex // derived from s, never serialized (ledger_index.go)
	// quietAck is the last renewal's RenewRequest.QuietAck: ix.verSup
	// follows holdsSuperseded under it (a change rebuilds the index).
	quietAck bool
}

// newLedger returns a ledger whose pool starts full or empty at startNanos.
func newLedger(cfg LedgerConfig, startNanos int64) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTime(startNanos); err != nil {
		return nil, err
	}
	l := &Ledger{s: LedgerState{Config: cfg, PoolNanos: startNanos, NowNanos: startNanos, NextID: 1}}
	l.s.PoolRateMilliPerSec, _ = l.poolTerms(startNanos)
	if cfg.StartFull {
		l.s.PoolMilli = cfg.CapacityMilli
		l.s.InitialPoolMilli = cfg.CapacityMilli
	}
	return l, nil
}

// NewLedgerFromState rebuilds a ledger from a snapshot, checking it first.
func NewLedgerFromState(s LedgerState) (*Ledger, error) {
	l := &Ledger{s: cloneState(s)}
	if err := l.s.Config.Validate(); err != nil {
		return nil, err
	}
	if err := l.CheckInvariants(); err != nil {
		return nil, err
	}
	return l, nil
}

// State returns a deep copy of the ledger's state.
func (l *Ledger) State() LedgerState { return cloneState(l.s) }

func cloneState(s LedgerState) LedgerState {
	out := s
	out.Leases = make([]Lease, len(s.Leases))
	for i, le := range s.Leases {
		out.Leases[i] = le
		out.Leases[i].Superseded = append([]Share(nil), le.Superseded...)
		out.Leases[i].Replaced = append([]Share(nil), le.Replaced...)
	}
	return out
}

// Config returns the ledger's budget.
func (l *Ledger) Config() LedgerConfig { return l.s.Config }

// PoolMilli returns the pool level as of the latest operation.
func (l *Ledger) PoolMilli() int64 { return l.s.PoolMilli }

// NowNanos returns the cluster time of the latest operation.
func (l *Ledger) NowNanos() int64 { return l.s.NowNanos }

// Stats returns the token-flow counters.
func (l *Ledger) Stats() LedgerStats { return l.s.Stats }

// Leases returns copies of the live leases, sorted by (ClientID, Incarnation).
func (l *Ledger) Leases() []Lease { return cloneState(l.s).Leases }

// LeaseCount returns the number of live leases.
func (l *Ledger) LeaseCount() int { return len(l.s.Leases) }

// AppendHolders appends to dst the distinct client IDs that hold live
// leases, in order, without copying the leases (the FSM's client index).
func (l *Ledger) AppendHolders(dst []string) []string { return l.table().appendClients(dst) }

// heldTotal returns Σ held r_i and Σ held b_i at the latest operation's time.
func (l *Ledger) heldTotal() (rateMilliPerSec, capMilli int64) {
	return l.heldExcept(-1, l.s.NowNanos)
}

// PoolFullAt returns the cluster time at which the pool will be full if no
// lease changes before then (math.MaxInt64 if it never fills).
func (l *Ledger) PoolFullAt() int64 {
	if h := l.s.HoldAllUntilNanos; h > l.s.NowNanos {
		// Rule (j): empty and held until h, then minting at no more than r.
		wait := nanosToMintPer(l.s.Config.RateMilliPerSec, l.s.Config.poolPeriod(), l.s.Config.CapacityMilli-l.s.PoolMilli+l.s.DebtMilli)
		if wait == int64(RetryNever) {
			return math.MaxInt64
		}
		return satAdd(h, wait)
	}
	rate, capMilli := l.poolTerms(l.s.NowNanos)
	if l.s.PoolMilli >= capMilli && l.s.DebtMilli == 0 {
		return l.s.NowNanos
	}
	wait := nanosToMintPer(rate, l.s.Config.poolPeriod(), capMilli-l.s.PoolMilli+l.s.DebtMilli)
	if wait == int64(RetryNever) {
		return math.MaxInt64
	}
	return max(l.s.NowNanos, satAdd(l.s.PoolNanos, wait))
}

// NextExpiry returns the earliest time a live lease can be removed (its
// current expiry, or a later one of its replaced leases' terms): the
// cluster time at which the leader should propose Expire.
func (l *Ledger) NextExpiry() (int64, bool) {
	if next, found, ok := l.minHold(); ok {
		return next, found
	}
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
func (l *Ledger) heldExcept(skip int, nowNanos int64) (rate, capMilli int64) {
	if r, c, ok := l.heldFast(skip, nowNanos); ok {
		return r, c
	}
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

func (l *Ledger) poolTerms(nowNanos int64) (rate, capMilli int64) {
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
func (l *Ledger) advance(nowNanos int64) error {
	if nowNanos < l.s.NowNanos {
		return fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, l.s.NowNanos)
	}
	if err := checkTime(nowNanos); err != nil {
		return err
	}
	if l.ix.ok && nowNanos < l.ix.nextBreak() {
		// No superseded or replaced entry expires by now: the held totals
		// stay as they are (but for rule j's end) and nothing is pruned.
		if h := l.s.HoldAllUntilNanos; h > l.s.NowNanos && h <= nowNanos {
			rate, capMilli := l.poolTerms(l.s.NowNanos)
			l.mintTo(h, rate, capMilli)
			l.s.NowNanos = h
			l.repricePool()
		}
		rate, capMilli := l.poolTerms(l.s.NowNanos)
		l.mintTo(nowNanos, rate, capMilli)
		l.s.NowNanos = nowNanos
		l.repricePool()
		return nil
	}
	l.ix.ok = false // the scans below; the next renewal rebuilds the index
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
		l.s.Leases[i].Superseded = pruneShares(l.s.Leases[i].Superseded, l.s.Leases[i].Current, nowNanos)
		l.s.Leases[i].Replaced = pruneExpired(l.s.Leases[i].Replaced, nowNanos)
	}
	return nil
}

// pruneExpired drops the replaced terms that have expired. (Unlike
// superseded versions, none is ever dominated: they are summed.)
func pruneExpired(ss []Share, nowNanos int64) []Share {
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

// replacedTerms is what a grant replacing old at now keeps held (rule h,
// replacedHolds): old's live replaced entries, plus old's own held terms
// until its expiry if it is still live.
func replacedTerms(old *Lease, nowNanos int64) []Share {
	r, c := old.ownHeldAt(nowNanos)
	own := Share{RateMilliPerSec: r, CapMilli: c, ExpiresNanos: old.Current.ExpiresNanos}
	return replacedHolds(old.Replaced, own, old.Current.ExpiresNanos > nowNanos && (r > 0 || c > 0), nowNanos)
}

func (l *Ledger) mintTo(t, rate, capMilli int64) {
	// Rule (k): the key's debt is a level below the empty pool, so what
	// the pool mints pays it first.
	before := l.s.PoolMilli - l.s.DebtMilli
	if before > capMilli {
		// Cannot happen while the invariants hold; never mint over the cap.
		capMilli = before
	}
	level, at := refill(before, l.s.PoolNanos, t, rate, l.s.Config.poolPeriod(), capMilli)
	l.s.PoolNanos = at
	l.s.PoolMilli, l.s.DebtMilli = max(level, 0), max(-level, 0)
	l.s.Stats.MintedMilli += level - before
}

// addDebt moves an ended lease's debt (rule k) into the key's debt,
// paying it from the pool first: the pool is empty while the key owes.
func (l *Ledger) addDebt(debtMilli int64) {
	if debtMilli <= 0 {
		return
	}
	l.s.Stats.DebtInMilli = satAdd(l.s.Stats.DebtInMilli, debtMilli)
	paid := min(debtMilli, l.s.PoolMilli)
	l.s.PoolMilli -= paid
	l.s.DebtMilli = satAdd(l.s.DebtMilli, debtMilli-paid)
}

// DebtMilli returns the key's debt (rule k) as of the latest operation.
func (l *Ledger) DebtMilli() int64 { return l.s.DebtMilli }

// allowedDebt is Σ a_i over every lease but skip (-1: all).
func (l *Ledger) allowedDebt(skip int) int64 {
	var sum int64
	for j := range l.s.Leases {
		if j != skip {
			sum = satAdd(sum, l.s.Leases[j].heldDebt())
		}
	}
	return sum
}

// debtTarget is lease i's fair allowance (rule k): its equal part of
// MaxDebtMilli over the leases and one more seat (as the pool keeps one of
// the leftover burst, §3.2: a newcomer finds room while the others hold
// theirs), limited by the room the key's debt and the others' held
// allowances leave.
func (l *Ledger) debtTarget(i int) int64 {
	cfg := l.s.Config
	others := l.allowedDebt(i)
	if l.s.DebtCeilingMilli > 0 && satAdd(satAdd(others, l.s.Leases[i].heldDebt()), l.s.DebtMilli) <= cfg.MaxDebtMilli {
		l.s.DebtCeilingMilli = 0 // back within the bound
	}
	target := cfg.MaxDebtMilli / int64(len(l.s.Leases)+1)
	room := cfg.MaxDebtMilli - l.s.DebtMilli - others - l.s.Leases[i].DebtPendingMilli
	return max(0, min(target, room))
}

// debtAllowance is lease i's allowance at a grant: its fair allowance.
func (l *Ledger) debtAllowance(i int) int64 {
	if l.s.Config.MaxDebtMilli == 0 && l.s.DebtCeilingMilli == 0 {
		return l.s.Leases[i].DebtAllowanceMilli
	}
	return l.debtTarget(i)
}

// renewDebt applies rule (k) at a renewal of lease i to version version
// acknowledging acked (at most the previous version) with the client's
// report clampedDebt: an acknowledged lowering moves the reported debt
// into the key's debt and frees the rest; then the allowance moves toward
// its fair part: raised at once within the room, or lowered with the
// part taken off held until acknowledged (only one lowering pends).
func (l *Ledger) renewDebt(i int, version, acked uint64, ackValid bool, clampedDebt int64) {
	le := &l.s.Leases[i]
	if le.DebtPendingMilli > 0 && ackValid && acked >= le.DebtPendingVersion {
		debt := min(clampedDebt, le.DebtPendingMilli)
		le.DebtPendingMilli, le.DebtPendingVersion = 0, 0
		l.addDebt(debt)
	}
	if l.s.Config.MaxDebtMilli == 0 && l.s.DebtCeilingMilli == 0 && le.DebtAllowanceMilli == 0 {
		return
	}
	target := l.debtTarget(i)
	switch {
	case target > le.DebtAllowanceMilli:
		le.DebtAllowanceMilli = target
	case target < le.DebtAllowanceMilli && le.DebtPendingMilli == 0:
		if l.has(faultDebtLoweredAtOnce) {
			le.DebtAllowanceMilli = target // the deliberate bug: the old allowance freed before the client lifted its level
			return
		}
		le.DebtPendingMilli = le.DebtAllowanceMilli - target
		le.DebtPendingVersion = version
		le.DebtAllowanceMilli = target
	}
}

// endDebt is what a lease that ends without a release owes, at most
// (rule k): its whole allowance.
func (l *Ledger) endDebt(le *Lease) int64 {
	if l.has(FaultForgetDebt) {
		return 0 // the deliberate bug: the holder's debt dies with its lease
	}
	return le.heldDebt()
}

// repricePool records the pool's mint rate after a change of the held
// totals. The time not yet minted is carried forward only if the rate did not
// rise; otherwise that fraction would be minted at the higher rate, so it is
// dropped (at most one milli-token, always toward fewer tokens).
func (l *Ledger) repricePool() {
	rate, _ := l.poolTerms(l.s.NowNanos)
	if rate > l.s.PoolRateMilliPerSec {
		l.s.PoolNanos = l.s.NowNanos
	}
	l.s.PoolRateMilliPerSec = rate
}

// pruneShares drops superseded versions that have expired or that the
// current terms dominate (they can no longer raise the held maximum).
func pruneShares(ss []Share, cur Share, nowNanos int64) []Share {
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
func (l *Ledger) capPool() int64 {
	_, capMilli := l.poolTerms(l.s.NowNanos)
	if l.s.PoolMilli <= capMilli {
		return 0
	}
	burned := l.s.PoolMilli - capMilli
	l.s.PoolMilli = capMilli
	l.s.Stats.BurnedMilli += burned
	return burned
}

// table is the ledger's holders table (holders.go).
func (l *Ledger) table() holders[Lease, *Lease] {
	return holders[Lease, *Lease]{rows: &l.s.Leases, now: &l.s.NowNanos, nextID: &l.s.NextID, kind: "lease", search: searchLeases}
}

func (l *Ledger) find(clientID string, incarnation uint64) (int, bool) {
	return l.table().find(clientID, incarnation)
}

// GrantRequest asks for a new lease.
type GrantRequest struct {
	ClientID    string
	Incarnation uint64 // a restarted client uses a new, larger incarnation
	// Seq increases with every grant request the incarnation sends. A grant
	// replaces the holder's existing lease only if its Seq is larger, so a
	// delayed retry cannot replace a lease the client has since installed.
	Seq uint64
	// Weight scales the fair share (>= 1; 0 means 1).
	Weight int64
	// Demands: how much rate and burst the client expects to use, and the
	// largest single cost it was asked to admit recently (0: unknown).
	DemandRateMilliPerSec int64
	DemandBurstMilli      int64
	DemandMaxCostMilli    int64
	TTLNanos              int64 // D: the lease's duration
	// LeftoverBurst divides the budget with DivideOptions.LeftoverBurst:
	// the burst no demand claims goes to every holder. The fsm sets it
	// when its FeatureLeftoverBurst switch is on.
	LeftoverBurst bool
}

// RenewRequest extends a lease and reports fresh demands.
type RenewRequest struct {
	ClientID              string
	Incarnation           uint64
	LeaseID               LeaseID
	Weight                int64
	DemandRateMilliPerSec int64
	DemandBurstMilli      int64
	DemandMaxCostMilli    int64
	TTLNanos              int64
	// AckedVersion is the version of the terms the client has installed
	// (applied their rate and cap) before it sent this renewal; 0 if none
	// known. Superseded versions strictly older than it are dropped at
	// this renewal. A version above the lease's current one cannot have
	// been installed (it was never granted) and is ignored.
	AckedVersion uint64
	// ClampedMilli is what the client's bucket lost (its level above the
	// new cap) when it installed version AckedVersion. The pool gets it
	// back, bounded by the caps the older versions this renewal drops
	// hold above that version's.
	ClampedMilli int64
	// LeftoverBurst: as GrantRequest.LeftoverBurst.
	LeftoverBurst bool
	// QuietAck asks for an early acknowledgement (Grant.AckSoon) only
	// for a cut worth freeing soon: a superseded version holding more
	// than r/32 of rate or B/32 of cap above the current terms
	// (worthAcking). The fsm sets it when its FeatureQuietAck switch is
	// on; off, any versioned superseded version asks, as before.
	QuietAck bool
	// DebtClampedMilli is the debt the client's bucket had beyond the
	// allowance of version AckedVersion when it installed it (it lifted
	// its level to minus that allowance): it moves into the key's debt
	// when the renewal acknowledges a lowering (rule k).
	DebtClampedMilli int64
}

// ReleaseRequest returns a lease. The client sends it only after it has
// stopped admitting from the lease, reporting the tokens it did not spend.
type ReleaseRequest struct {
	ClientID     string
	Incarnation  uint64
	LeaseID      LeaseID
	UnspentMilli int64
	// DebtMilli is how far below zero the client's bucket was when it
	// stopped (rule k): it moves into the key's debt, at most the lease's
	// allowance. A release reports unspent tokens or a debt, not both.
	DebtMilli int64
}

// Grant is the coordinator's answer to a grant or renewal.
type Grant struct {
	LeaseID         LeaseID
	RateMilliPerSec int64 // r_i: the client mints at clientMintRate(r_i, ρ)
	CapMilli        int64 // b_i
	// StartMilli is the tokens debited from the pool for the client's
	// bucket. Always zero for renewals (rule d).
	StartMilli int64
	// TopUpMilli (renewals only, rule i) is the tokens debited from the
	// pool for the client to add to its bucket when it installs these
	// terms (never above the new cap): at most the raise of the cap.
	TopUpMilli int64
	// returnedMilli (renewals only, rule i) is what this renewal credited
	// to the pool of the client's reported clamp.
	returnedMilli int64
	ExpiresNanos  int64
	// TTLNanos is ExpiresNanos minus this operation's cluster time: the
	// client may use the lease until ClientDeadline(send, TTLNanos, ρ).
	TTLNanos    int64
	BurnedMilli int64 // pool tokens destroyed to make room for this cap
	// Version of these terms (0 when unversioned).
	Version uint64
	// DebtAllowanceMilli is how far below zero the client's bucket may go
	// (rule k; Lease.DebtAllowanceMilli). Never lower than the lease's
	// previous answer's.
	DebtAllowanceMilli int64
	// AckSoon (renewals only): this lease holds a superseded version above
	// its current terms, which the next renewal's acknowledgement of these
	// terms frees. The client should renew as soon as it has installed
	// them (docs/design.md §3.2).
	AckSoon bool
	// RenewSoon (renewals only) says the key's shares are still
	// converging around this lease: it gets less than its fair share while
	// others hold more. The client should renew early.
	RenewSoon bool
}

func validateHolder(clientID string, ttl int64) error {
	if clientID == "" {
		return fmt.Errorf("%w: client ID is empty", ErrInvalidRequest)
	}
	if len(clientID) > limits.ClientIDBytes {
		return fmt.Errorf("%w: client ID is %d bytes, more than %d", ErrInvalidRequest, len(clientID), limits.ClientIDBytes)
	}
	if ttl <= 0 || ttl > MaxTTLNanos {
		return fmt.Errorf("%w: lease duration %d ns is outside (0, %d]", ErrInvalidRequest, ttl, MaxTTLNanos)
	}
	return nil
}

func validateDemand(weight, rate, burst, maxCost int64) error {
	if weight < 0 || weight > 1<<20 {
		return fmt.Errorf("%w: weight %d is outside [0, %d]", ErrInvalidRequest, weight, 1<<20)
	}
	if rate < 0 || burst < 0 || maxCost < 0 {
		return fmt.Errorf("%w: demands must not be negative (rate %d, burst %d, max cost %d)", ErrInvalidRequest, rate, burst, maxCost)
	}
	return nil
}

// terms computes the rate and cap for lease index i (which must already
// carry its fresh demands): divideBudget over every live lease's demands,
// limited by what the other leases hold now. While others hold part of the
// budget, a cap below the lease's floor (capFloor: its largest recent cost)
// would admit nothing it is asked for and keep that much from everyone
// else, so the lease gets no cap and no rate instead, and asks again at its
// next renewal.
//
// leftoverBurst selects DivideOptions.LeftoverBurst (the fsm's
// FeatureLeftoverBurst switch), unless faultLeftoverBurstToPool forces it
// off.
func (l *Ledger) terms(i int, leftoverBurst bool) (rate, capMilli int64, err error) {
	cfg := l.s.Config
	mine := l.shareClaim(i)
	if l.has(faultLeftoverBurstToPool) {
		leftoverBurst = false // the deliberate bug: the division of before the switch
	}
	ri, bi, fast := l.fastShares(i, leftoverBurst)
	if fast {
		l.ix.fastTerms++
	} else {
		l.ix.fullTerms++
		claims := make([]budgetClaim, len(l.s.Leases))
		// Leases are sorted by holder, so slice order is the deterministic
		// tie-break the division needs; no IDs are built on this hot path.
		for j := range l.s.Leases {
			le := &l.s.Leases[j]
			c := l.shareClaim(j)
			c.Incumbent = le.Current.CapMilli > 0 && le.Current.CapMilli >= capFloor(c, cfg.CapacityMilli)
			claims[j] = c
		}
		var rs, bs []int64
		if l.has(faultSliverShares) {
			rs, bs, err = fairSharesOnly(cfg, claims)
		} else {
			rs, bs, err = divideBudgetWith(cfg.RateMilliPerSec, cfg.CapacityMilli, claims, DivideOptions{LeftoverBurst: leftoverBurst})
		}
		if err != nil {
			return 0, 0, err
		}
		ri, bi = rs[i], bs[i]
	}
	otherRate, otherCap := l.heldExcept(i, l.s.NowNanos)
	rate = max(0, min(ri, cfg.RateMilliPerSec-otherRate))
	capMilli = max(0, min(bi, cfg.CapacityMilli-otherCap))
	if l.has(faultFloorOverHeld) {
		// The deliberate bug: a floor granted on top of what others hold.
		capMilli = max(capMilli, capFloor(mine, cfg.CapacityMilli))
	}
	if !l.has(faultSliverShares) && otherCap > 0 && capMilli < capFloor(mine, cfg.CapacityMilli) {
		return 0, 0, nil
	}
	return rate, capMilli, nil
}

// fairSharesOnly is the division before floors and leftovers (plain
// weighted max-min fair shares of the demands), for faultSliverShares.
func fairSharesOnly(cfg LedgerConfig, cs []budgetClaim) (rates, caps []int64, err error) {
	rc := make([]fairClaim, len(cs))
	bc := make([]fairClaim, len(cs))
	for j, c := range cs {
		rc[j] = fairClaim{Demand: min(c.RateMilliPerSec, cfg.RateMilliPerSec), Weight: c.Weight}
		bc[j] = fairClaim{Demand: min(c.BurstMilli, cfg.CapacityMilli), Weight: c.Weight}
	}
	if rates, err = fairShares(cfg.RateMilliPerSec, rc); err != nil {
		return nil, nil, err
	}
	caps, err = fairShares(cfg.CapacityMilli, bc)
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
func (l *Ledger) Grant(nowNanos int64, req GrantRequest) (Grant, error) {
	if err := validateHolder(req.ClientID, req.TTLNanos); err != nil {
		return Grant{}, err
	}
	if err := validateDemand(req.Weight, req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli); err != nil {
		return Grant{}, err
	}
	i, exists, err := l.table().admit(nowNanos, req.ClientID, req.Incarnation, req.Seq, l.s.Config.maxLeases())
	if err != nil {
		return Grant{}, err
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
	if exists && l.ix.ok {
		l.removeAt(i) // the index forgets the replaced lease; insertAt below records the new one
	}
	if exists {
		replaced = l.s.Leases[i]
		if !l.has(FaultForgetReplaced) {
			le.Replaced = replacedTerms(&replaced, nowNanos)
		}
	}
	l.table().put(i, exists, le)
	if l.ix.ok {
		l.insertAt(i)
	} else {
		l.rebuildIndex()
	}
	rate, capMilli, err := l.terms(i, req.LeftoverBurst)
	if err != nil {
		// Unreachable (inputs were validated); undo the insertion anyway so
		// a failed grant leaves no half-made lease behind.
		l.ix.ok = false
		if exists {
			l.s.Leases[i] = replaced
		} else {
			l.s.Leases = append(l.s.Leases[:i], l.s.Leases[i+1:]...)
		}
		return Grant{}, err
	}
	l.s.NextID++
	if exists {
		// Rule (k): the replaced bucket may be in debt and still in use.
		l.addDebt(l.endDebt(&replaced))
	}
	cur := &l.s.Leases[i]
	cur.Current = Share{RateMilliPerSec: rate, CapMilli: capMilli, ExpiresNanos: nowNanos + req.TTLNanos, Version: 1}
	cur.DebtAllowanceMilli = l.debtAllowance(i)
	// Rule (c): the bucket's starting tokens come out of the pool.
	start := min(capMilli, l.s.PoolMilli)
	var burned int64
	l.updateHeld(i)
	if l.has(FaultStartFullNoDebit) {
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
		Version: cur.Current.Version, DebtAllowanceMilli: cur.DebtAllowanceMilli,
	}, nil
}

// Renew extends a live lease and re-divides the budget with its fresh
// demands. A reduced rate or cap keeps the old value held until the old
// expiry or its acknowledgement (rule b, dropAcknowledged); a renewal never
// adds tokens (rule d). The expiry never moves earlier. The new terms get
// the next version and the answer says whether the key's shares are still
// converging (Grant.RenewSoon).
func (l *Ledger) Renew(nowNanos int64, req RenewRequest) (Grant, error) {
	if err := validateHolder(req.ClientID, req.TTLNanos); err != nil {
		return Grant{}, err
	}
	if err := validateDemand(req.Weight, req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli); err != nil {
		return Grant{}, err
	}
	if req.ClampedMilli < 0 || req.ClampedMilli > MaxCapacityMilli || req.DebtClampedMilli < 0 || req.DebtClampedMilli > MaxCapacityMilli {
		return Grant{}, fmt.Errorf("%w: clamped %d or debt clamped %d milli-tokens is outside [0, %d]", ErrInvalidRequest, req.ClampedMilli, req.DebtClampedMilli, int64(MaxCapacityMilli))
	}
	i, err := l.table().lookup(nowNanos, req.ClientID, req.Incarnation, req.LeaseID, true)
	if err != nil {
		return Grant{}, err
	}
	if err := checkTime(nowNanos); err != nil {
		return Grant{}, err
	}
	if e := l.s.Leases[i].Current.ExpiresNanos; e <= nowNanos {
		return Grant{}, l.table().expired(req.LeaseID, e, nowNanos)
	}
	if err := l.advance(nowNanos); err != nil {
		return Grant{}, err
	}
	if l.quietAck != req.QuietAck {
		l.quietAck = req.QuietAck
		l.ix.ok = false // verSup follows holdsSuperseded's rule
	}
	l.ensureIndex()
	l.setClaim(i, req.Weight, req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli)
	cur := &l.s.Leases[i]
	rate, capMilli, err := l.terms(i, req.LeftoverBurst)
	if err != nil {
		return Grant{}, err
	}
	old := cur.Current
	if !l.has(faultForgetSuperseded) {
		cur.Superseded = append(cur.Superseded, old)
	}
	cur.Current = Share{RateMilliPerSec: rate, CapMilli: capMilli, ExpiresNanos: max(old.ExpiresNanos, nowNanos+req.TTLNanos)}
	var returned int64
	cur.Current.Version = old.Version + 1
	// The client may have installed only a version that was granted: an
	// acknowledgement above the latest one is ignored.
	if req.AckedVersion <= old.Version {
		if !l.has(FaultCreditAtReduction) {
			returned = l.returnClamped(append([]Share{old}, cur.Superseded...), req.AckedVersion, req.ClampedMilli)
		}
		cur.Superseded = dropAcknowledged(cur.Superseded, req.AckedVersion, l.fault)
	}
	if l.has(FaultCreditAtReduction) && capMilli < old.CapMilli {
		// The deliberate bug: the cut is credited before the client has
		// clamped its bucket (it still holds those tokens).
		returned = old.CapMilli - capMilli
		l.creditPool(returned)
	}
	cur.Superseded = pruneShares(cur.Superseded, cur.Current, nowNanos)
	var topUp int64
	if capMilli > old.CapMilli {
		// Rule (i): the raise of the cap is room in the client's bucket;
		// fill it from the pool rather than burning what the pool can no
		// longer hold.
		topUp = min(capMilli-old.CapMilli, l.s.PoolMilli)
		if !l.has(faultTopUpNoDebit) {
			l.s.PoolMilli -= topUp
			l.s.Stats.DebitedMilli += topUp
		}
	}
	l.updateHeld(i)
	burned := l.capPool()
	l.repricePool()
	l.renewDebt(i, cur.Current.Version, req.AckedVersion, req.AckedVersion <= old.Version, req.DebtClampedMilli)
	return Grant{
		LeaseID: cur.ID, RateMilliPerSec: rate, CapMilli: capMilli,
		ExpiresNanos: cur.Current.ExpiresNanos, TTLNanos: cur.Current.ExpiresNanos - nowNanos, BurnedMilli: burned,
		Version: cur.Current.Version, AckSoon: l.holdsSuperseded(i), RenewSoon: l.converging(i),
		TopUpMilli: topUp, returnedMilli: returned, DebtAllowanceMilli: cur.DebtAllowanceMilli,
	}, nil
}

// returnClamped credits the pool with the tokens the client reports its
// bucket lost when it installed version acked (rule i), and returns what it
// credited. The client clamped its level from the cap of a version older
// than acked down to acked's cap, so the credit is at most the largest cap
// an older held version has above acked's. Those older versions are
// dropped by this same commit (dropAcknowledged), which is what makes the
// credit happen once per version: a duplicated or retried renewal, or a
// delayed one carrying an older acknowledgement, finds no older version
// held and credits nothing. A version no longer held (expired, or acked's
// own terms gone) credits nothing either. versions is the lease's terms
// before this renewal: the latest first, then the superseded ones.
func (l *Ledger) returnClamped(versions []Share, acked uint64, clampedMilli int64) int64 {
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
	l.creditPool(credit)
	return credit
}

// creditPool returns tokens to the pool (rules e, i): they pay the key's
// debt first (rule k).
func (l *Ledger) creditPool(milli int64) {
	l.s.Stats.CreditedMilli += milli
	paid := min(milli, l.s.DebtMilli)
	l.s.DebtMilli -= paid
	l.s.PoolMilli += milli - paid
}

// dropAcknowledged drops the superseded versions a renewal acknowledging
// version acked frees: those strictly older than acked. The client
// installed version acked (applied its rate and cap to its bucket) before
// it sent the renewal, so from then on it mints and stores within acked's
// terms and never again under an older version; the renewal commits after
// that, so the older versions were held for as long as they were used. The
// acknowledged version itself stays held (the client uses it until it
// installs this renewal's answer), and so does every newer one (a delayed
// renewal carries an old acknowledgement: the client may be using a
// version granted since). Unversioned (0) terms are never dropped early.
func dropAcknowledged(ss []Share, acked uint64, fault Fault) []Share {
	return dropVersions(ss, acked, func(v uint64) bool {
		if faultsBuilt {
			switch fault {
			case faultAckDropsAcked:
				return v != 0 && v <= acked // the deliberate bug: the version in use
			case faultAckDropsNewer:
				return v != 0 && v != acked // the deliberate bug: versions granted since
			}
		}
		return v != 0 && v < acked
	})
}

// holdsSuperseded reports whether lease i holds a versioned superseded
// version (after pruning: above its current terms, not expired), which an
// acknowledgement of its current terms would free (Grant.AckSoon); with
// QuietAck, one worth acknowledging soon (worthAcking).
func (l *Ledger) holdsSuperseded(i int) bool {
	le := &l.s.Leases[i]
	for _, s := range le.Superseded {
		if s.Version != 0 && (!l.quietAck || worthAcking(l.s.Config, s, le.Current)) {
			return true
		}
	}
	return false
}

// worthAcking says whether superseded terms s hold enough above the
// current terms cur that an early acknowledgement should free them
// (RenewRequest.QuietAck): more than r/32 of rate or B/32 of cap. A
// trickle's share moves by a fraction of a token at every renewal as its
// measured demand wobbles; each move was a cut that asked for a renewal
// 50 ms later, about two renewals per interval on every such key, to free
// what nobody was waiting for. A smaller cut stays held until the
// holder's next renewal at its normal interval acknowledges it, or until
// it expires (rule b), as any cut did before early renewals.
func worthAcking(cfg LedgerConfig, s, cur Share) bool {
	return s.RateMilliPerSec-cur.RateMilliPerSec > cfg.RateMilliPerSec/32 ||
		s.CapMilli-cur.CapMilli > cfg.CapacityMilli/32
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
func (l *Ledger) converging(i int) bool {
	cfg := l.s.Config
	me := &l.s.Leases[i]
	wantRate := min(me.DemandRateMilliPerSec, cfg.RateMilliPerSec)
	wantCap := min(me.DemandBurstMilli, cfg.CapacityMilli)
	short := me.Current.RateMilliPerSec < wantRate || me.Current.CapMilli < wantCap
	if ix := &l.ix; ix.ok {
		others := ix.nVerSup
		if ix.verSup[i] {
			others--
		}
		if short && others > 0 {
			return true
		}
		floor := min(wantRate, MulDiv(cfg.RateMilliPerSec, max(me.Weight, 1), ix.sumW))
		return me.Current.RateMilliPerSec < floor-floor/32
	}
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

// ReleaseResult reports what a release returned to the pool.
type ReleaseResult struct {
	CreditedMilli int64
}

// Release ends a lease whose client has stopped admitting from it. It credits
// back min(unspent, b_i) and frees the lease's rate and cap at once (rule e).
func (l *Ledger) Release(nowNanos int64, req ReleaseRequest) (ReleaseResult, error) {
	if req.ClientID == "" {
		return ReleaseResult{}, fmt.Errorf("%w: client ID is empty", ErrInvalidRequest)
	}
	if req.UnspentMilli < 0 {
		return ReleaseResult{}, fmt.Errorf("%w: unspent %d is negative", ErrInvalidRequest, req.UnspentMilli)
	}
	if req.DebtMilli < 0 || (req.DebtMilli > 0 && req.UnspentMilli > 0) {
		return ReleaseResult{}, fmt.Errorf("%w: debt %d with unspent %d: a bucket is in debt or holds tokens, not both", ErrInvalidRequest, req.DebtMilli, req.UnspentMilli)
	}
	i, err := l.table().lookup(nowNanos, req.ClientID, req.Incarnation, req.LeaseID, false)
	if err != nil {
		return ReleaseResult{}, err
	}
	if err := l.advance(nowNanos); err != nil {
		return ReleaseResult{}, err
	}
	credit := min(req.UnspentMilli, l.s.Leases[i].Current.CapMilli)
	// A lowering not yet acknowledged: the client may have lifted a debt
	// beyond the lowered allowance that no report has carried yet.
	debt := satAdd(min(req.DebtMilli, l.s.Leases[i].DebtAllowanceMilli), l.s.Leases[i].DebtPendingMilli)
	if l.has(faultReleaseDebtUnreported) {
		debt = 0 // the deliberate bug: the settlement never reaches the ledger
	}
	if le := &l.s.Leases[i]; len(le.Replaced) > 0 && !l.has(FaultForgetReplaced) {
		// Rule (h) outlives the release: the replaced buckets may still be
		// in use. The lease stays as a placeholder holding only them, under
		// a fresh ID nobody holds (so it cannot be renewed or released),
		// until Expire removes it at their expiry.
		if l.ix.ok {
			l.setClaim(i, le.Weight, 0, 0, le.DemandMaxCostMilli)
		}
		le.ID = l.table().takeID()
		le.Current = Share{ExpiresNanos: lastExpiry(le.Replaced, 0)}
		le.Superseded = nil
		le.DemandRateMilliPerSec, le.DemandBurstMilli, le.StartMilli = 0, 0, 0
		le.DebtAllowanceMilli, le.DebtPendingMilli, le.DebtPendingVersion = 0, 0, 0
		l.updateHeld(i)
	} else {
		if l.ix.ok {
			l.removeAt(i)
		}
		l.s.Leases = append(l.s.Leases[:i], l.s.Leases[i+1:]...)
	}
	l.creditPool(credit)
	l.addDebt(debt)
	// The pool's capacity grew by at least the freed cap, so this burns
	// nothing while the invariants hold; it is the guard if they did not.
	l.capPool()
	l.repricePool()
	return ReleaseResult{CreditedMilli: credit}, nil
}

// Expire removes every lease whose current expiry is at or before now,
// freeing its rate and cap without returning tokens (rule f). It returns the
// removed IDs in holder order.
func (l *Ledger) Expire(nowNanos int64) ([]LeaseID, error) {
	return l.ExpireThrough(nowNanos, nowNanos)
}

// ExpireThrough advances to now but removes only leases whose expiry is at
// or before throughNanos (<= now): a new leader expires inherited leases a
// margin late, in case its clock runs faster than the old leader's did.
func (l *Ledger) ExpireThrough(nowNanos, throughNanos int64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	throughNanos = min(throughNanos, nowNanos)
	if next, found, ok := l.minHold(); ok && (!found || next > throughNanos) {
		// Nothing to remove (what removeLeases would find, in O(1)).
		l.repricePool()
		return nil, nil
	}
	// A lease whose replaced leases' terms outlive its own (the lease
	// duration shrank) stays, holding them, until they expire too.
	return l.removeLeases(func(le *Lease) bool { return le.holdUntil() <= throughNanos }), nil
}

// removeLeases frees, without credit, every lease gone says to, keeping
// the holder order, and returns their IDs (Expire and Revoke).
func (l *Ledger) removeLeases(gone func(*Lease) bool) []LeaseID {
	var debt int64
	for i := range l.s.Leases {
		if le := &l.s.Leases[i]; le.heldDebt() > 0 && gone(le) {
			debt = satAdd(debt, l.endDebt(le))
		}
	}
	l.addDebt(debt) // rule (k): the holders' possible debt outlives them
	ids := l.table().removeWhere(gone)
	if len(ids) > 0 {
		l.ix.ok = false
	}
	l.repricePool()
	return ids
}

// overcommitted reports whether leases granted under a budget larger than
// the current one may still be held: before OvercommitUntilNanos, or while
// a lease that expired by then has not been removed by Expire yet.
func (l *Ledger) overcommitted() bool {
	s := &l.s
	if s.HoldAllUntilNanos > s.NowNanos {
		return true // rule (j): the restored leases beside the whole budget held
	}
	return l.table().overcommitted(s.OvercommitUntilNanos)
}

// markOvercommit records, when the leases hold more than cfg's budget,
// that rule (a) holds only against the budget they were granted under
// until the last of them has expired (OvercommitUntilNanos). Reconfigure
// lowers the budget under held terms; a grant can carry a replaced
// lease's terms held past a reduction that was waiting for their expiry
// (replacedTerms keeps the largest version until the latest expiry).
func (l *Ledger) markOvercommit(cfg LedgerConfig) {
	hr, hc := l.heldExcept(-1, l.s.NowNanos)
	if hr <= cfg.RateMilliPerSec && hc <= cfg.CapacityMilli {
		return
	}
	l.s.OvercommitUntilNanos = l.table().lastHold(l.s.OvercommitUntilNanos)
}

// Reconfigure changes the budget at cluster time now (a policy update).
// Leases already granted keep their terms until they are renewed or expire:
// held capacity is honoured, so if the budget shrank, the old budget bounds
// admissions until the last old lease expires. New grants and renewals are
// divided under the new budget at once, and the pool is burned down to
// whatever room the new budget leaves.
func (l *Ledger) Reconfigure(nowNanos int64, cfg LedgerConfig) error {
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
	l.ix.ok = false
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
	if owed := satAdd(l.allowedDebt(-1), l.s.DebtMilli); owed > cfg.MaxDebtMilli {
		// Rule (k) against the larger bound until the allowances granted
		// under the old one end and the debt is paid down.
		l.s.DebtCeilingMilli = max(l.s.DebtCeilingMilli, owed)
	}
	l.s.Config = cfg
	l.capPool()
	l.repricePool()
	return nil
}

// RaiseNextID makes the next lease ID at least min: after a snapshot
// restore, IDs must not be reused, or a delayed release or renewal of a
// lease granted after the snapshot could end a new lease of the same
// holder that got its ID.
func (l *Ledger) RaiseNextID(min LeaseID) {
	l.s.NextID = max(l.s.NextID, min)
}

// HoldAll applies rule (j) at cluster time now: until untilNanos the whole
// budget counts as held (by leases this ledger does not know: a snapshot
// restore replaced the state that granted them), so grants and renewals get
// no rate and no cap; the pool is emptied (its tokens burned: the lost
// state may have handed them out) and mints nothing until then. A later
// call can only extend the hold.
func (l *Ledger) HoldAll(nowNanos, untilNanos int64) error {
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	if err := checkTime(untilNanos); err != nil {
		return err
	}
	l.ix.ok = false
	l.s.Stats.BurnedMilli += l.s.PoolMilli
	l.s.PoolMilli = 0
	// Rule (k) with (j): leases the restored state does not know may owe
	// every allowance it does not account for; they become key debt.
	if room := l.s.Config.MaxDebtMilli - l.allowedDebt(-1) - l.s.DebtMilli; room > 0 {
		l.addDebt(room)
	}
	l.s.HoldAllUntilNanos = max(l.s.HoldAllUntilNanos, untilNanos)
	l.repricePool()
	return nil
}

// Revoke frees, without credit, every lease of clientID whose incarnation is
// below incarnation: a client that restarted with a new incarnation tells
// the coordinator its previous process is gone. It returns the freed IDs.
func (l *Ledger) Revoke(nowNanos int64, clientID string, incarnation uint64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	return l.removeLeases(func(le *Lease) bool { return le.ClientID == clientID && le.Incarnation < incarnation }), nil
}

// CheckInvariants verifies rules (a) and the structural invariants at the
// latest operation's time. It returns nil for every reachable state.
func (l *Ledger) CheckInvariants() error {
	s := &l.s
	cfg := s.Config
	if s.PoolNanos > s.NowNanos {
		return fmt.Errorf("pool credited to %d, after now %d", s.PoolNanos, s.NowNanos)
	}
	if err := l.checkDebt(); err != nil {
		return err
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

func (l *Ledger) checkLeases() error {
	s := &l.s
	if s.PoolMilli < 0 {
		return fmt.Errorf("pool %d is negative", s.PoolMilli)
	}
	for i := range s.Leases {
		if err := l.table().checkRow(i); err != nil {
			return err
		}
		le := &s.Leases[i]
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
	if want := s.InitialPoolMilli + st.MintedMilli - st.DebitedMilli + st.CreditedMilli - st.BurnedMilli - st.DebtInMilli; want != s.PoolMilli-s.DebtMilli {
		return fmt.Errorf("conservation: pool %d - debt %d, flows say %d", s.PoolMilli, s.DebtMilli, want)
	}
	return nil
}

// checkDebt verifies rule (k): the key's debt and allowances are within
// MaxDebtMilli (or the ceiling a lowering Reconfigure left), and the pool
// is empty while the key owes.
func (l *Ledger) checkDebt() error {
	s := &l.s
	if s.DebtMilli < 0 || s.DebtCeilingMilli < 0 {
		return fmt.Errorf("rule (k): debt %d or ceiling %d is negative", s.DebtMilli, s.DebtCeilingMilli)
	}
	if s.DebtMilli > 0 && s.PoolMilli > 0 {
		return fmt.Errorf("rule (k): pool %d beside debt %d", s.PoolMilli, s.DebtMilli)
	}
	var allowed int64
	for i := range s.Leases {
		a, p := s.Leases[i].DebtAllowanceMilli, s.Leases[i].DebtPendingMilli
		if a < 0 || a > MaxCapacityMilli || p < 0 || p > MaxCapacityMilli || (p > 0) != (s.Leases[i].DebtPendingVersion > 0) {
			return fmt.Errorf("rule (k): lease %d's debt allowance %d (pending %d at version %d) is outside [0, %d]", s.Leases[i].ID, a, p, s.Leases[i].DebtPendingVersion, int64(MaxCapacityMilli))
		}
		allowed = satAdd(allowed, s.Leases[i].heldDebt())
	}
	if owed := satAdd(allowed, s.DebtMilli); owed > max(s.Config.MaxDebtMilli, s.DebtCeilingMilli) {
		return fmt.Errorf("rule (k): allowances %d + debt %d exceed max debt %d", allowed, s.DebtMilli, max(s.Config.MaxDebtMilli, s.DebtCeilingMilli))
	}
	return nil
}
