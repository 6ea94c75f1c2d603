package lease

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// WindowLedger is the coordinator's state for one key of a leased
// fixed-window policy (docs/design.md §8): the current window [start, end)
// in window time, G = the units granted that count in it, and the live
// chunks. A holder asks for a chunk; the ledger grants min(ask, L − G) and
// adds it to G. A chunk is valid only for its window: its lease expires, in
// cluster time, no later than the window's end is due. Unspent units
// return to G only on an explicit release while the window is still the
// chunk's; a chunk whose holder dies, or that expires, counts as spent.
// At a new window G starts at what live chunks (of earlier windows) still
// hold, which is nothing unless window time jumped ahead of cluster time
// (a forward re-sync of the epoch offset) or the window's definition
// changed.
//
// Every operation takes the cluster time t (leases' expiry) and the window
// time w (Unix nanoseconds, for the calendar); neither may go backwards.
// Like Ledger it reads no clock and is not safe for concurrent use.
type WindowLedger struct {
	cfg WindowLedgerConfig
	s   WindowLedgerState
	// fault is a negative control's broken rule (tests only).
	fault WindowFault
	// slewed is the slew counter at the coming operation (ObserveSlew).
	slewed int64
}

// WindowLedgerConfig configures a WindowLedger.
type WindowLedgerConfig struct {
	// LimitMilli is L, the units a window admits (milli-units).
	LimitMilli int64
	Spec       WindowSpec
	// MaxLeases bounds the live chunks (defaultMaxLeases when 0).
	MaxLeases int
	// KeepSpent: a change of the window's definition remembers the count
	// of the window it leaves until that window ends (Reconfigure), so a
	// change back within it resumes that count instead of starting the
	// window afresh (fsm.FeatureWindowSpent; docs/design.md §8.2,
	// "Changes"). Off, as before the switch, a change forgets it.
	KeepSpent bool
	// Approx: sliding-window-approx (fixed windows only). The previous
	// window's count, weighted by the share of the sliding window it still
	// covers, is charged too: a grant at window time w leaves
	// G + ⌈G_prev·(end − w)/W⌉ ≤ L (docs/design.md §8.5).
	Approx bool
	// MaxDebtMilli is D, the policy's max_debt (fixed windows only): each
	// chunk may be charged after the work down to −(its debt allowance),
	// the debt it used counts in the window where its chunk ends, and what
	// goes beyond L is carried into the next window (docs/design.md §8.6).
	// 0: no debt, as before FeatureDebt covered windows.
	MaxDebtMilli int64
}

// WindowLease is one holder's chunk.
type WindowLease struct {
	ID          LeaseID
	ClientID    string
	Incarnation uint64
	GrantSeq    uint64
	// ExpiresNanos is the cluster time the chunk lapses at (its holder has
	// stopped using it by then).
	ExpiresNanos int64
	// WindowStart names the window whose count holds GrantedMilli.
	WindowStart int64
	// GrantedMilli is every unit the chunk was granted (its cap).
	GrantedMilli int64
	// Replaced: a later grant of the same holder replaced it (or its
	// incarnation was revoked: Revoke); it stays
	// until it expires (a second user of the holder may still spend it,
	// so a new window must still count it), and cannot be renewed.
	Replaced bool
	// DebtAllowanceMilli is how far below zero the holder's chunk may be
	// charged (rule w1, docs/design.md §8.6): held until the chunk ends,
	// when the debt its holder reports (all of it at an expiry) counts in
	// the current window (rule w2).
	DebtAllowanceMilli int64
}

// WindowLedgerState is everything a WindowLedger replicates.
type WindowLedgerState struct {
	NowNanos    int64 // the last cluster time seen
	WindowNanos int64 // the last window time seen
	// Start and End are the current window (End 0: none yet).
	Start, End int64
	// CountMilli is G: the units granted that count in the current window.
	CountMilli int64
	// PrevCountMilli is the previous window's G when it ended, if it is the
	// window just before the current one (else 0): Approx weighs it.
	PrevCountMilli int64
	// ExhaustThrough: every window starting at or before it is full (G =
	// L) when it begins or now (a restore's hold, docs/design.md §8). 0:
	// none (window time 0 is 1970).
	ExhaustThrough int64
	NextID         LeaseID
	Leases         []WindowLease // sorted by ID
	// SlewedNanos is the window clock's slew counter (WindowClock.SlewedBy)
	// as of the last operation: how much slower than cluster time window
	// time has run since is the counter now less this (ObserveSlew).
	SlewedNanos int64
	// Spent is the count of each window of another definition the key
	// counted in that has not yet ended (KeepSpent), sorted by Start then
	// definition; at most maxWindowSpent.
	Spent []WindowSpent
	// DebtMilli is the debt counted in the current window (part of
	// CountMilli): the overshoot carried from the window before (rule w3)
	// plus the debt of the chunks that ended in this one (rule w2). With
	// the live chunks' allowances it never exceeds MaxDebtMilli.
	DebtMilli int64
}

// WindowSpent is a window of another definition than the key's current
// one, and the count G it had when the key's definition last changed away
// from it (docs/design.md §8.2, "Changes").
type WindowSpent struct {
	Spec       WindowSpec
	Start, End int64
	CountMilli int64
}

// maxWindowSpent bounds WindowLedgerState.Spent: a key whose definition
// changes more often than that within one window has its oldest spent
// window folded into ExhaustThrough (it, and every window of any
// definition starting by its start, is then full), never forgotten.
const maxWindowSpent = 8

// WindowGrant is a chunk as granted or renewed.
type WindowGrant struct {
	LeaseID LeaseID
	// ChunkMilli is what this operation added; TotalMilli the chunk's
	// units in all (the client's cap).
	ChunkMilli, TotalMilli int64
	// TTLNanos is the lease's expiry less the commit's cluster time.
	TTLNanos int64
	// The window, its limit and what it has left after this operation.
	Start, End     int64
	LimitMilli     int64
	RemainingMilli int64
	// DebtAllowanceMilli is the chunk's debt allowance (rule w1).
	DebtAllowanceMilli int64
}

// WindowGrantRequest asks for a chunk.
type WindowGrantRequest struct {
	ClientID    string
	Incarnation uint64
	Seq         uint64
	// AskMilli is the chunk wanted (sized to demand by the caller).
	AskMilli int64
	TTLNanos int64
}

// WindowRenewRequest extends a chunk and asks for more units.
type WindowRenewRequest struct {
	ClientID    string
	Incarnation uint64
	LeaseID     LeaseID
	AskMilli    int64
	TTLNanos    int64
}

// WindowFault names a deliberately broken window ledger (negative controls).
type WindowFault uint8

const (
	windowFaultNone WindowFault = iota
	// WindowFaultDeadReturns: an expired chunk returns its units to the
	// window (as if its dead holder had spent nothing).
	WindowFaultDeadReturns
	// windowFaultRenewUncounted: units a renewal adds are not counted in G.
	windowFaultRenewUncounted
	// windowFaultNoCarry: a new window starts at 0 even while chunks of an
	// earlier one are still live.
	windowFaultNoCarry
	// windowFaultApproxIgnoresPrev: sliding-window-approx grants as a fixed
	// window, ignoring the previous window's weighted count.
	windowFaultApproxIgnoresPrev
	// windowFaultRevokeDrops: a revoked (dead incarnation's) chunk is
	// dropped at once, so a window that begins while it still lives (after
	// a forward re-sync of window time) does not count it.
	windowFaultRevokeDrops
	// windowFaultSlewUncarried: a new window's carry takes its beginning as
	// if window time had run with cluster time since the last operation,
	// ignoring a slew (so it begins too late, and misses chunks live when
	// it did).
	windowFaultSlewUncarried
	// windowFaultForgetSpent: a change of the window's definition forgets
	// the count of the window it leaves (as if KeepSpent were off), so a
	// change back within that window starts it afresh.
	windowFaultForgetSpent
	// windowFaultIdleIgnoresCarry: Idle as of v0.1.0 (IdleUncarried): a
	// ledger whose expired chunks a forward re-sync let outlive its window
	// is idle once its own window is over, so a fresh one forgets the
	// units they were spent with in later windows.
	windowFaultIdleIgnoresCarry
	// windowFaultDebtNotCarried: a new window starts at 0 debt, forgetting
	// the overshoot of the window before (rule w3 broken).
	windowFaultDebtNotCarried
	// windowFaultAllowanceUncounted: a chunk's end frees its allowance
	// without counting the debt its holder used (rule w2 broken).
	windowFaultAllowanceUncounted
	// windowFaultDebtDroppedAtExpiry: an expired (or replaced, revoked)
	// chunk's debt is dropped, as if its dead holder had owed nothing.
	windowFaultDebtDroppedAtExpiry
)

// NewWindowLedger returns an empty ledger.
func NewWindowLedger(cfg WindowLedgerConfig) (*WindowLedger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &WindowLedger{cfg: cfg, s: WindowLedgerState{NextID: 1}}, nil
}

// NewWindowLedgerFromState rebuilds a ledger from its replicated state.
func NewWindowLedgerFromState(cfg WindowLedgerConfig, st WindowLedgerState) (*WindowLedger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if st.CountMilli < 0 || st.PrevCountMilli < 0 || st.End < st.Start || st.NextID == 0 {
		return nil, fmt.Errorf("%w: window state count %d, window [%d, %d), next ID %d", ErrInvalidConfig, st.CountMilli, st.Start, st.End, st.NextID)
	}
	if st.DebtMilli < 0 || st.DebtMilli > st.CountMilli {
		return nil, fmt.Errorf("%w: window debt %d outside [0, count %d]", ErrInvalidConfig, st.DebtMilli, st.CountMilli)
	}
	seen := map[LeaseID]bool{}
	for _, le := range st.Leases {
		if le.ID >= st.NextID || seen[le.ID] || le.GrantedMilli < 0 || le.DebtAllowanceMilli < 0 {
			return nil, fmt.Errorf("%w: window lease %d (next ID %d, units %d)", ErrInvalidConfig, le.ID, st.NextID, le.GrantedMilli)
		}
		seen[le.ID] = true
	}
	if len(st.Spent) > maxWindowSpent {
		return nil, fmt.Errorf("%w: %d spent windows, more than %d", ErrInvalidConfig, len(st.Spent), maxWindowSpent)
	}
	for _, sp := range st.Spent {
		if sp.End <= sp.Start || sp.CountMilli <= 0 {
			return nil, fmt.Errorf("%w: spent window [%d, %d) count %d", ErrInvalidConfig, sp.Start, sp.End, sp.CountMilli)
		}
	}
	st.Spent = slices.Clone(st.Spent)
	st.Leases = slices.Clone(st.Leases)
	slices.SortFunc(st.Leases, func(a, b WindowLease) int { return int(a.ID - b.ID) })
	return &WindowLedger{cfg: cfg, s: st}, nil
}

func (c WindowLedgerConfig) validate() error {
	if c.LimitMilli < 0 || c.LimitMilli > MaxCapacityMilli {
		return fmt.Errorf("%w: window limit %d milli-units is outside [0, %d]", ErrInvalidConfig, c.LimitMilli, MaxCapacityMilli)
	}
	if c.Spec.Period == "" && (c.Spec.FixedNanos <= 0 || c.Spec.FixedNanos > MaxWindowNanos) {
		return fmt.Errorf("%w: window %d ns is outside (0, %d]", ErrInvalidConfig, c.Spec.FixedNanos, MaxWindowNanos)
	}
	if c.MaxDebtMilli < 0 || c.MaxDebtMilli > MaxCapacityMilli {
		return fmt.Errorf("%w: max debt %d milli-units is outside [0, %d]", ErrInvalidConfig, c.MaxDebtMilli, int64(MaxCapacityMilli))
	}
	if c.Approx && c.MaxDebtMilli != 0 {
		return fmt.Errorf("%w: an approximate sliding window takes no debt (max_debt is for fixed windows)", ErrInvalidConfig)
	}
	if c.Approx && c.Spec.Period != "" {
		return fmt.Errorf("%w: an approximate sliding window needs a fixed window, not a calendar period", ErrInvalidConfig)
	}
	return nil
}

func (c WindowLedgerConfig) maxLeases() int { return maxLeasesOr(c.MaxLeases) }

// Config returns the ledger's configuration.
func (l *WindowLedger) Config() WindowLedgerConfig { return l.cfg }

// State returns a copy of the replicated state.
func (l *WindowLedger) State() WindowLedgerState {
	st := l.s
	st.Leases = slices.Clone(l.s.Leases)
	st.Spent = slices.Clone(l.s.Spent)
	return st
}

// injectFault switches the ledger to a broken variant (tests only).
func (l *WindowLedger) injectFault(f WindowFault) { l.fault = f }

// RaiseNextID makes lease IDs start at least at id (a restore's new
// generation).
func (l *WindowLedger) RaiseNextID(id LeaseID) { l.s.NextID = max(l.s.NextID, id) }

// LeaseCount is the number of chunks held (replaced ones included).
func (l *WindowLedger) LeaseCount() int { return len(l.s.Leases) }

// Window returns the current window, its count G and limit L.
func (l *WindowLedger) Window() (start, end, countMilli, limitMilli int64) {
	return l.s.Start, l.s.End, l.s.CountMilli, l.cfg.LimitMilli
}

// NextExpiry is the earliest chunk expiry, or 0 with no chunk.
func (l *WindowLedger) NextExpiry() int64 {
	var next int64
	for _, le := range l.s.Leases {
		if next == 0 || le.ExpiresNanos < next {
			next = le.ExpiresNanos
		}
	}
	return next
}

// Idle reports whether the ledger can be dropped without changing any
// answer: no chunk, and its window over by window time w (a fresh ledger
// then starts the same window with the same count, nothing), and no chunk
// it still holds, though expired, that an operation at (t, w) would count
// in w's window or, for Approx, the one before it (carries): after a
// forward re-sync of window time a chunk may outlive its window and be
// spent in later ones, which the ledger has not yet rolled to
// (docs/design.md §8.2, "Collection"). The caller observes the slew first
// (ObserveSlew), as before an operation.
func (l *WindowLedger) Idle(t, w int64) bool {
	return l.idle(t, w) && (l.has(windowFaultIdleIgnoresCarry) || !l.carries(t, w))
}

// IdleUncarried is Idle as of v0.1.0, without the carry check: the rule
// of a cluster whose fsm.FeatureWindowIdleCarry switch is off.
func (l *WindowLedger) IdleUncarried(t, w int64) bool { return l.idle(t, w) }

func (l *WindowLedger) idle(t, w int64) bool {
	for _, sp := range l.s.Spent {
		if w < sp.End {
			return false // a change back within it resumes its count
		}
	}
	for _, le := range l.s.Leases {
		if le.ExpiresNanos > t {
			return false
		}
	}
	if l.s.End == 0 {
		return true
	}
	if l.carryAt(w) > 0 {
		return false // the window holding w starts in debt (rule w3)
	}
	if l.cfg.Approx {
		// The next window weighs this one's count (PrevCountMilli): only
		// once that one is over too, or there is no count to weigh, does a
		// fresh ledger answer the same.
		return w >= l.s.End+(l.s.End-l.s.Start) || l.s.CountMilli == 0 && (w >= l.s.End || l.s.PrevCountMilli == 0 && l.s.ExhaustThrough < l.s.Start)
	}
	return w >= l.s.End || l.s.CountMilli == 0 && l.s.ExhaustThrough < l.s.Start
}

// carryAt is the debt a window holding w (after the current one) would
// start with (rule w3; roll's rule).
func (l *WindowLedger) carryAt(w int64) int64 {
	if l.s.DebtMilli == 0 || w < l.s.End {
		return 0
	}
	carry := min(max(l.s.CountMilli-l.cfg.LimitMilli, 0), l.s.DebtMilli)
	if start, _ := l.cfg.Spec.At(w); start != l.s.End {
		carry = max(carry-l.cfg.LimitMilli, 0)
	}
	return carry
}

// carries reports whether an operation at (t, w) would start a new window
// counting units of chunks the ledger still holds (expired since its last
// operation, so not yet dropped) in it, or, for Approx, in the window
// before it: roll's rule, with the window before taken from began − W
// whatever the last window was.
func (l *WindowLedger) carries(t, w int64) bool {
	if l.s.End == 0 || w < l.s.End {
		return false // no new window: the held chunks count in this one's G
	}
	start, end := l.cfg.Spec.At(w)
	began := start - (w - t) - max(l.slewed-l.s.SlewedNanos, 0)
	if l.cfg.Approx {
		began -= end - start
	}
	for _, le := range l.s.Leases {
		if le.GrantedMilli > 0 && le.ExpiresNanos > began {
			return true
		}
	}
	return false
}

// ObserveSlew tells the ledger the window clock's slew counter
// (WindowClock.SlewedBy) at the cluster time of its next operation. A
// caller whose window time may run slower than cluster time (a slew) sets
// it before every operation; one whose window time never does leaves it.
func (l *WindowLedger) ObserveSlew(slewed int64) { l.slewed = slewed }

// advance moves to (t, w): expired chunks go (their units stay counted),
// and at a new window the count restarts from what live chunks still hold.
func (l *WindowLedger) advance(t, w int64) error {
	if t < l.s.NowNanos || w < l.s.WindowNanos {
		return fmt.Errorf("%w: cluster time %d (last %d), window time %d (last %d)", ErrTimeBackwards, t, l.s.NowNanos, w, l.s.WindowNanos)
	}
	// slack: how much window time has run slower than cluster time since
	// the last operation, at most (a slew), so a window that began since
	// began at most this much earlier in cluster time than w − t says.
	slack := max(l.slewed-l.s.SlewedNanos, 0)
	l.s.SlewedNanos = max(l.s.SlewedNanos, l.slewed)
	if l.has(windowFaultSlewUncarried) {
		slack = 0
	}
	l.s.NowNanos, l.s.WindowNanos = t, w
	l.s.Spent = slices.DeleteFunc(l.s.Spent, func(sp WindowSpent) bool { return w >= sp.End })
	if l.s.End == 0 || w >= l.s.End {
		l.roll(t, w, slack)
	}
	kept := l.s.Leases[:0]
	for _, le := range l.s.Leases {
		if le.ExpiresNanos > t {
			kept = append(kept, le)
			continue
		}
		if l.has(WindowFaultDeadReturns) && le.WindowStart == l.s.Start {
			l.s.CountMilli = max(l.s.CountMilli-le.GrantedMilli, 0)
		}
		if !l.has(windowFaultDebtDroppedAtExpiry) {
			// The ledger cannot know what its holder charged since its
			// last word: all of the allowance counts (rule w2).
			l.countDebt(le.DebtAllowanceMilli)
		}
	}
	clear(l.s.Leases[len(kept):])
	l.s.Leases = kept
	return nil
}

// roll starts the window holding w. Its count starts at the units of the
// chunks still live when it began (at or after cluster time
// Start − (w − t) − slack: window time runs with cluster time, or slower by
// at most slack, the slew since the last operation, which came before the
// window began; forward steps only make the true beginning later), which
// lapse with it only if window time ran ahead of the chunks' expiry or the
// window's definition changed; chunks that lapsed before it began leave
// their units in the windows they had.
func (l *WindowLedger) roll(t, w, slack int64) {
	oldEnd, oldCount := l.s.End, l.s.CountMilli
	// Rule w3: what the window's count went beyond L by (its debt's part
	// of it) is carried into the next, which starts in debt; a window
	// skipped in between (no operation) paid L of it.
	carry := min(max(oldCount-l.cfg.LimitMilli, 0), l.s.DebtMilli)
	l.s.Start, l.s.End = l.cfg.Spec.At(w)
	if oldEnd != 0 && oldEnd != l.s.Start {
		carry = max(carry-l.cfg.LimitMilli, 0)
	}
	if l.has(windowFaultDebtNotCarried) {
		carry = 0
	}
	l.s.PrevCountMilli = 0
	began := l.s.Start - (w - t) - slack
	if oldEnd != 0 && oldEnd == l.s.Start {
		l.s.PrevCountMilli = oldCount
	} else if l.cfg.Approx {
		// The window just before this one saw no operation, but chunks of
		// an earlier one may have been spent in it after a forward re-sync
		// of window time: they are its count.
		W := l.s.End - l.s.Start
		for _, le := range l.s.Leases {
			if le.ExpiresNanos > began-W && !l.has(windowFaultNoCarry) {
				l.s.PrevCountMilli = satAdd(l.s.PrevCountMilli, le.GrantedMilli)
			}
		}
	}
	l.s.CountMilli, l.s.DebtMilli = carry, carry
	for i := range l.s.Leases {
		le := &l.s.Leases[i]
		if le.ExpiresNanos > began && !l.has(windowFaultNoCarry) {
			l.s.CountMilli = satAdd(l.s.CountMilli, le.GrantedMilli)
		}
		le.WindowStart = l.s.Start
	}
	l.exhaust()
}

// exhaust fills a window that a restore's hold covers.
func (l *WindowLedger) exhaust() {
	if l.s.ExhaustThrough != 0 && l.s.Start <= l.s.ExhaustThrough {
		l.s.CountMilli = max(l.s.CountMilli, l.cfg.LimitMilli)
	}
}

// ExhaustThrough makes every window starting at or before w full (a
// restore from a snapshot that may not know what was granted in it).
func (l *WindowLedger) ExhaustThrough(w int64) {
	l.s.ExhaustThrough = max(l.s.ExhaustThrough, w)
	// Chunks the snapshot does not know may have used every allowance it
	// does not account for: that room is debt of the current window.
	if room := l.debtRoom(); room > 0 && l.s.End != 0 && l.s.Start <= l.s.ExhaustThrough {
		l.countDebt(room)
	}
	if l.s.End != 0 {
		l.exhaust()
	}
}

// remaining is what a grant at the last window time seen may still give:
// L − G, less the previous window's weighted count for Approx.
func (l *WindowLedger) remaining() int64 {
	left := l.cfg.LimitMilli - l.s.CountMilli
	if l.cfg.Approx && l.s.PrevCountMilli > 0 && !l.has(windowFaultApproxIgnoresPrev) {
		W := l.s.End - l.s.Start
		left -= ceilMulDiv(l.s.PrevCountMilli, min(max(l.s.End-l.s.WindowNanos, 0), W), W)
		// In whole units, as every cost is: a fraction could never be spent.
		left -= ((left % MilliPerToken) + MilliPerToken) % MilliPerToken
	}
	return max(left, 0)
}

// debtRoom is D less the window's debt and the live chunks' allowances
// (never below 0: a Reconfigure may have lowered D).
func (l *WindowLedger) debtRoom() int64 {
	room := l.cfg.MaxDebtMilli - l.s.DebtMilli
	for _, le := range l.s.Leases {
		room -= le.DebtAllowanceMilli
	}
	return max(room, 0)
}

// debtAllowance is a new chunk's allowance (rule w1): min(D/(n+1), room)
// over the n live chunks besides it.
func (l *WindowLedger) debtAllowance() int64 {
	if l.cfg.MaxDebtMilli == 0 {
		return 0
	}
	n := 0
	for _, le := range l.s.Leases {
		if !le.Replaced {
			n++
		}
	}
	return min(l.cfg.MaxDebtMilli/int64(n+1), l.debtRoom())
}

// countDebt counts debt a chunk's holder used in the current window: in G
// and in the window's debt (rule w2).
func (l *WindowLedger) countDebt(debtMilli int64) {
	if debtMilli <= 0 || l.has(windowFaultAllowanceUncounted) {
		return
	}
	l.s.CountMilli = satAdd(l.s.CountMilli, debtMilli)
	l.s.DebtMilli = satAdd(l.s.DebtMilli, debtMilli)
}

// DebtMilli is the debt counted in the current window: the overshoot
// carried into it and the debt of the chunks that ended in it.
func (l *WindowLedger) DebtMilli() int64 { return l.s.DebtMilli }

// ttl is a chunk's lease: at most ttlNanos, and over when its window is.
func (l *WindowLedger) ttl(w, ttlNanos int64) int64 { return max(min(ttlNanos, l.s.End-w), 0) }

// table is the window ledger's holders table (holders.go); its rows are
// in ID order, so it finds them by ID.
func (l *WindowLedger) table() holders[WindowLease, *WindowLease] {
	return holders[WindowLease, *WindowLease]{rows: &l.s.Leases, now: &l.s.NowNanos, nextID: &l.s.NextID, kind: "lease"}
}

func (l *WindowLedger) answer(le *WindowLease, chunk int64) WindowGrant {
	return WindowGrant{LeaseID: le.ID, ChunkMilli: chunk, TotalMilli: le.GrantedMilli, TTLNanos: le.ExpiresNanos - l.s.NowNanos,
		Start: l.s.Start, End: l.s.End, LimitMilli: l.cfg.LimitMilli, RemainingMilli: l.remaining(), DebtAllowanceMilli: le.DebtAllowanceMilli}
}

// Grant gives the holder a new chunk of min(ask, L − G), replacing its
// earlier chunk (which stays counted, and held until it expires).
func (l *WindowLedger) Grant(t, w int64, req WindowGrantRequest) (WindowGrant, error) {
	if req.ClientID == "" || req.AskMilli < 0 || req.TTLNanos <= 0 {
		return WindowGrant{}, fmt.Errorf("%w: client %q, ask %d, ttl %d", ErrInvalidRequest, req.ClientID, req.AskMilli, req.TTLNanos)
	}
	if err := l.advance(t, w); err != nil {
		return WindowGrant{}, err
	}
	live := 0
	for i := range l.s.Leases {
		le := &l.s.Leases[i]
		if le.ClientID != req.ClientID || le.Incarnation != req.Incarnation || le.Replaced {
			live++
			continue
		}
		if err := staleGrant(req.ClientID, req.Incarnation, req.Seq, le.GrantSeq); err != nil {
			return WindowGrant{}, err
		}
		le.Replaced = true
		live++
	}
	if live >= l.cfg.maxLeases() {
		return WindowGrant{}, tooManyLeases(live)
	}
	chunk := min(req.AskMilli, l.remaining())
	l.s.CountMilli += chunk
	le := WindowLease{ID: l.table().takeID(), ClientID: req.ClientID, Incarnation: req.Incarnation, GrantSeq: req.Seq,
		ExpiresNanos: satAdd(t, l.ttl(w, req.TTLNanos)), WindowStart: l.s.Start, GrantedMilli: chunk, DebtAllowanceMilli: l.debtAllowance()}
	l.s.Leases = append(l.s.Leases, le)
	return l.answer(&l.s.Leases[len(l.s.Leases)-1], chunk), nil
}

// Renew extends a live chunk (never past its window's end) and adds
// min(ask, L − G) to it.
func (l *WindowLedger) Renew(t, w int64, req WindowRenewRequest) (WindowGrant, error) {
	if req.AskMilli < 0 || req.TTLNanos <= 0 {
		return WindowGrant{}, fmt.Errorf("%w: ask %d, ttl %d", ErrInvalidRequest, req.AskMilli, req.TTLNanos)
	}
	if err := l.advance(t, w); err != nil {
		return WindowGrant{}, err
	}
	i := l.table().findID(req.LeaseID, req.ClientID, req.Incarnation)
	if i < 0 {
		return WindowGrant{}, fmt.Errorf("%w: lease %d (it may have expired with its window)", ErrLeaseNotFound, req.LeaseID)
	}
	le := &l.s.Leases[i]
	if le.Replaced {
		return WindowGrant{}, fmt.Errorf("%w: lease %d was replaced by a later grant", ErrLeaseExpired, req.LeaseID)
	}
	chunk := min(req.AskMilli, l.remaining())
	if !l.has(windowFaultRenewUncounted) {
		l.s.CountMilli += chunk
	}
	le.GrantedMilli = satAdd(le.GrantedMilli, chunk)
	le.ExpiresNanos = max(le.ExpiresNanos, satAdd(t, l.ttl(w, req.TTLNanos)))
	return l.answer(le, chunk), nil
}

// Release ends a chunk whose holder has stopped using it: its unspent
// units (at most its own) return to G if the chunk's window is still the
// current one. It returns the units credited.
func (l *WindowLedger) Release(t, w int64, clientID string, incarnation uint64, id LeaseID, unspentMilli int64) (int64, error) {
	return l.ReleaseDebt(t, w, clientID, incarnation, id, unspentMilli, 0)
}

// ReleaseDebt is Release with the debt the holder's chunk was charged
// below zero (at most its allowance): it counts in the current window,
// where the charge settled (rule w2, docs/design.md §8.6). A replaced
// chunk's whole allowance counts (its holder's other user may have
// charged it).
func (l *WindowLedger) ReleaseDebt(t, w int64, clientID string, incarnation uint64, id LeaseID, unspentMilli, debtMilli int64) (int64, error) {
	if unspentMilli < 0 || debtMilli < 0 {
		return 0, fmt.Errorf("%w: unspent %d, debt %d", ErrInvalidRequest, unspentMilli, debtMilli)
	}
	if err := l.advance(t, w); err != nil {
		return 0, err
	}
	i := l.table().findID(id, clientID, incarnation)
	if i < 0 {
		return 0, fmt.Errorf("%w: lease %d", ErrLeaseNotFound, id)
	}
	le := l.s.Leases[i]
	l.s.Leases = slices.Delete(l.s.Leases, i, i+1)
	if le.Replaced {
		if !l.has(windowFaultDebtDroppedAtExpiry) {
			l.countDebt(le.DebtAllowanceMilli)
		}
		return 0, nil
	}
	l.countDebt(min(debtMilli, le.DebtAllowanceMilli))
	if le.WindowStart != l.s.Start {
		return 0, nil
	}
	credit := min(unspentMilli, le.GrantedMilli, l.s.CountMilli-l.s.DebtMilli)
	l.s.CountMilli -= credit
	l.exhaust()
	return credit, nil
}

// Expire drops chunks expired by t (their units stay counted).
func (l *WindowLedger) Expire(t, w int64) (int, error) {
	n := len(l.s.Leases)
	if err := l.advance(t, w); err != nil {
		return 0, err
	}
	return n - len(l.s.Leases), nil
}

// Revoke retires every chunk of clientID older than incarnation: that
// process is gone, so the chunks can no longer be renewed or credited
// back, but they stay (as replaced) until they expire, still counted in
// any window that begins while they live: after a forward re-sync of
// window time (docs/design.md §8.2) a chunk may outlive its window, and
// its holder may have spent from it in the next one before it died. It
// returns the chunks retired.
func (l *WindowLedger) Revoke(clientID string, incarnation uint64) int {
	n := 0
	for i := range l.s.Leases {
		le := &l.s.Leases[i]
		if le.ClientID == clientID && le.Incarnation < incarnation && !le.Replaced {
			le.Replaced = true
			n++
		}
	}
	if l.has(windowFaultRevokeDrops) {
		l.s.Leases = slices.DeleteFunc(l.s.Leases, func(le WindowLease) bool {
			return le.ClientID == clientID && le.Incarnation < incarnation
		})
	}
	return n
}

// Holders lists the client IDs holding chunks, sorted, once each.
func (l *WindowLedger) Holders() []string {
	if len(l.s.Leases) == 0 {
		return nil
	}
	out := make([]string, 0, len(l.s.Leases))
	for _, le := range l.s.Leases {
		out = append(out, le.ClientID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Reconfigure applies a policy change at (t, w) without resetting the
// count: a new limit keeps G (lowered below G, nothing more is granted); a
// new window definition moves the current window to the new one holding w,
// with G carried over.
func (l *WindowLedger) Reconfigure(t, w int64, cfg WindowLedgerConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := l.advance(t, w); err != nil {
		return err
	}
	same := l.cfg.Spec.Equal(cfg.Spec)
	old := l.cfg.Spec
	l.cfg = cfg
	if !same {
		keep := cfg.KeepSpent && !l.has(windowFaultForgetSpent)
		if keep && l.s.End != 0 && l.s.CountMilli > 0 {
			l.rememberSpent(WindowSpent{Spec: old, Start: l.s.Start, End: l.s.End, CountMilli: l.s.CountMilli})
		}
		l.s.Start, l.s.End = cfg.Spec.At(w)
		for i := range l.s.Leases {
			l.s.Leases[i].WindowStart = l.s.Start
		}
		// Back in a window it already counted in: its count resumes, plus
		// the count carried from the window left (its live chunks may be
		// spent here too, as at any change), so nothing granted in it
		// before is granted again (docs/design.md §8.2, "Changes").
		if i := l.findSpent(cfg.Spec, l.s.Start); i >= 0 {
			if keep {
				l.s.CountMilli = satAdd(l.s.CountMilli, l.s.Spent[i].CountMilli)
			}
			l.s.Spent = slices.Delete(l.s.Spent, i, i+1)
		}
	}
	l.exhaust()
	return nil
}

func (l *WindowLedger) findSpent(spec WindowSpec, start int64) int {
	return slices.IndexFunc(l.s.Spent, func(sp WindowSpent) bool { return sp.Start == start && sp.Spec.Equal(spec) })
}

// rememberSpent records a window the key leaves with a count, replacing
// an earlier record of it; past maxWindowSpent the oldest record is folded
// into ExhaustThrough (its window, and any starting by its start, full).
func (l *WindowLedger) rememberSpent(sp WindowSpent) {
	if i := l.findSpent(sp.Spec, sp.Start); i >= 0 {
		sp.CountMilli = max(sp.CountMilli, l.s.Spent[i].CountMilli)
		l.s.Spent = slices.Delete(l.s.Spent, i, i+1)
	}
	l.s.Spent = append(l.s.Spent, sp)
	slices.SortStableFunc(l.s.Spent, func(a, b WindowSpent) int {
		switch {
		case a.Start != b.Start:
			return cmp.Compare(a.Start, b.Start)
		case a.Spec.Period != b.Spec.Period:
			return strings.Compare(a.Spec.Period, b.Spec.Period)
		case a.Spec.Timezone != b.Spec.Timezone:
			return strings.Compare(a.Spec.Timezone, b.Spec.Timezone)
		}
		return cmp.Compare(a.Spec.FixedNanos, b.Spec.FixedNanos)
	})
	for len(l.s.Spent) > maxWindowSpent {
		l.s.ExhaustThrough = max(l.s.ExhaustThrough, l.s.Spent[0].Start)
		l.s.Spent = slices.Delete(l.s.Spent, 0, 1)
	}
}
