package lease

import "fmt"

// Cluster-wide concurrency limits (docs/concurrency.md): a SlotLedger is the
// coordinator's account of one policy key's N slots. A lease holds s_i of
// them; a request on the holder takes one of its local slots and gives it
// back when it ends. The rules, checked by CheckInvariants after every
// operation in tests:
//
//	(S1) Σ held s_i <= N, where a lease holds the maximum over its current
//	     grant and every superseded version not yet acknowledged away, plus
//	     the sum of its replaced leases' held slots until their expiry.
//	(S2) A renewal that lowers a lease's slots keeps the old count held
//	     until a renewal acknowledging a version at least as new as the
//	     lowered one commits (the client acknowledges a version only once
//	     it has dropped to that version's count of running requests). Unlike
//	     a token share, a superseded slot count does not lapse at its own
//	     expiry while the lease lives on: requests started under it may
//	     still run under the renewed lease.
//	(S3) A raise comes only from free slots: N − Σ others' held − this
//	     lease's other held terms.
//	(S4) Release frees a lease's slots at once; the client sends it only
//	     after every request it started under the lease has ended.
//	(S5) Expiry frees a lease's slots at its expiry, never earlier: by then
//	     the holder's conservative local deadline has passed (§3.3 of
//	     docs/design.md), and with max_duration no request it started runs
//	     past that deadline.
//	(S6) A grant that replaces the same holder's live lease keeps the
//	     replaced lease's held slots held, summed, until its expiry (as rule
//	     (h) of the token ledger).

// SlotConfig is the budget of one concurrency key.
type SlotConfig struct {
	Limit     int64 // N: requests in flight across the cluster, [0, MaxSlots]
	MaxLeases int   // 0 means defaultMaxLeases
	// DriftPPM is ρ, the bound on every clock's rate error; the client's
	// usable span is ClientUsableNanos(TTL, ρ).
	DriftPPM int64
}

// MaxSlots bounds a concurrency limit: sums over maxLeasesLimit leases
// stay far inside int64.
const MaxSlots = 1 << 30

// Validate reports parameters outside the supported ranges.
func (c SlotConfig) Validate() error {
	if c.Limit < 0 || c.Limit > MaxSlots {
		return fmt.Errorf("%w: concurrency limit %d is outside [0, %d]", ErrInvalidConfig, c.Limit, MaxSlots)
	}
	if err := validateMaxLeases(c.MaxLeases); err != nil {
		return err
	}
	return validateDrift(c.DriftPPM)
}

func (c SlotConfig) maxLeases() int { return maxLeasesOr(c.MaxLeases) }

// SlotShare is one version of a slot lease's grant.
type SlotShare struct {
	Slots        int64
	ExpiresNanos int64 // for Replaced entries; Current's is the lease's expiry
	Version      uint64
}

// SlotLease is one client incarnation's slots.
type SlotLease struct {
	ID          LeaseID
	ClientID    string
	Incarnation uint64
	GrantSeq    uint64
	Weight      int64
	// DemandSlots is the count the client last asked for (running plus
	// queued requests, bounded by the client).
	DemandSlots int64
	// Current is the latest grant; its ExpiresNanos is the lease's expiry.
	Current SlotShare
	// LastTTLNanos is the duration the latest grant or renewal asked for.
	LastTTLNanos int64
	// Superseded holds earlier versions a renewal lowered, held until a
	// renewal acknowledging a newer version commits (rule S2), or until
	// the lease itself ends. Only versions above Current are kept.
	Superseded []SlotShare
	// Replaced holds the held slots of this holder's earlier leases a
	// grant replaced while they were live (rule S6), each until its
	// expiry. At most maxReplaced entries; older ones are summed.
	Replaced []SlotShare
}

// ownHeld is the maximum over the current grant and the superseded
// versions: the client runs requests under one count at a time.
func (l *SlotLease) ownHeld() int64 {
	s := l.Current.Slots
	for _, v := range l.Superseded {
		s = max(s, v.Slots)
	}
	return max(s, 0)
}

// replacedAt sums the replaced leases' slots not yet expired.
func (l *SlotLease) replacedAt(nowNanos int64) int64 {
	var s int64
	for _, r := range l.Replaced {
		if r.ExpiresNanos > nowNanos {
			s += max(r.Slots, 0)
		}
	}
	return s
}

// HeldAt is what the ledger counts as in use by this lease at cluster time
// now: its own counts until Expire removes it (expiry is a log entry, not
// a timer), plus its replaced leases' until their expiry.
func (l *SlotLease) HeldAt(nowNanos int64) int64 {
	return l.ownHeld() + l.replacedAt(nowNanos)
}

func (l *SlotLease) holdUntil() int64 { return lastExpiry(l.Replaced, l.Current.ExpiresNanos) }

// SlotLedgerState is a slot ledger's complete state, for snapshots.
type SlotLedgerState struct {
	Config   SlotConfig
	NowNanos int64
	NextID   LeaseID
	Leases   []SlotLease // sorted by (ClientID, Incarnation)
	// HoldAllUntilNanos: after a snapshot restore every slot counts as
	// held until then (rule j of the token ledger).
	HoldAllUntilNanos int64
	// OvercommitUntilNanos: after a Reconfigure lowered N, leases granted
	// under the old limit may hold more than N until this time.
	OvercommitUntilNanos int64
}

// SlotLedger is the coordinator's account of one concurrency key. Like
// Ledger, every operation takes the leader-stamped cluster time, nothing
// reads a clock, and iteration is over a sorted slice.
type SlotLedger struct {
	s     SlotLedgerState
	fault SlotFault
}

// SlotFault names a deliberately broken slot ledger, for negative controls.
type SlotFault uint8

const (
	// slotFaultNone is the correct ledger.
	slotFaultNone SlotFault = iota
	// SlotFaultForgetLowered frees a lowered grant's slots at the renewal
	// that lowers it, before the client has acknowledged dropping to the
	// new count (breaks S2).
	SlotFaultForgetLowered
	// slotFaultAckDropsAcked drops the acknowledged version too: the
	// client may still run that many requests (breaks S2).
	slotFaultAckDropsAcked
	// slotFaultEarlyExpiry reclaims a lease an eighth of its last lease
	// duration before its expiry (breaks S5).
	slotFaultEarlyExpiry
	// slotFaultForgetReplaced frees a replaced lease's slots at once
	// (breaks S6).
	slotFaultForgetReplaced
)

// NewSlotLedger returns an empty ledger at startNanos.
func NewSlotLedger(cfg SlotConfig, startNanos int64) (*SlotLedger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTime(startNanos); err != nil {
		return nil, err
	}
	return &SlotLedger{s: SlotLedgerState{Config: cfg, NowNanos: startNanos, NextID: 1}}, nil
}

// NewSlotLedgerFromState rebuilds a ledger from a snapshot, checking it.
func NewSlotLedgerFromState(s SlotLedgerState) (*SlotLedger, error) {
	l := &SlotLedger{s: cloneSlotState(s)}
	if err := l.s.Config.Validate(); err != nil {
		return nil, err
	}
	if err := l.CheckInvariants(); err != nil {
		return nil, err
	}
	return l, nil
}

func cloneSlotState(s SlotLedgerState) SlotLedgerState {
	out := s
	out.Leases = make([]SlotLease, len(s.Leases))
	for i, le := range s.Leases {
		le.Superseded = append([]SlotShare(nil), le.Superseded...)
		le.Replaced = append([]SlotShare(nil), le.Replaced...)
		out.Leases[i] = le
	}
	return out
}

// State returns a copy of the ledger's state.
func (l *SlotLedger) State() SlotLedgerState { return cloneSlotState(l.s) }

// Config returns the ledger's configuration.
func (l *SlotLedger) Config() SlotConfig { return l.s.Config }

// NowNanos is the cluster time of the latest operation.
func (l *SlotLedger) NowNanos() int64 { return l.s.NowNanos }

// Leases returns a copy of the leases, in holder order.
func (l *SlotLedger) Leases() []SlotLease { return cloneSlotState(l.s).Leases }

// LeaseCount is how many leases the ledger holds (no copy).
func (l *SlotLedger) LeaseCount() int { return len(l.s.Leases) }

// HoldAllUntilNanos is when a restore's hold of every slot ends (0: none).
func (l *SlotLedger) HoldAllUntilNanos() int64 { return l.s.HoldAllUntilNanos }

// AppendHolders appends the distinct client IDs holding leases, sorted,
// to dst (no copy of the ledger).
func (l *SlotLedger) AppendHolders(dst []string) []string { return l.table().appendClients(dst) }

// heldTotal returns Σ held slots at the latest operation's time.
func (l *SlotLedger) heldTotal() int64 { return l.heldExcept(-1, l.s.NowNanos) }

// Free returns N − Σ held (0 while a restore hold lasts).
func (l *SlotLedger) Free() int64 {
	if l.s.HoldAllUntilNanos > l.s.NowNanos {
		return 0
	}
	return max(0, l.s.Config.Limit-l.heldTotal())
}

// NextExpiry returns the earliest time Expire would remove a lease, and
// whether there is one: the leader proposes an expire entry then.
func (l *SlotLedger) NextExpiry() (int64, bool) {
	best, ok := int64(0), false
	for i := range l.s.Leases {
		if t := l.removableAt(&l.s.Leases[i]); !ok || t < best {
			best, ok = t, true
		}
	}
	return best, ok
}

// reclaimAt is when the lease's own slots may be freed: its expiry, exactly
// (ExpiresNanos: commit + TTL of its latest grant or renewal), never earlier.
// Under slotFaultEarlyExpiry, an eighth of that lease duration earlier.
func (l *SlotLedger) reclaimAt(le *SlotLease) int64 {
	if l.has(slotFaultEarlyExpiry) {
		return le.Current.ExpiresNanos - le.LastTTLNanos/8
	}
	return le.Current.ExpiresNanos
}

// removableAt is when Expire removes the lease: once its own slots and
// every replaced hold have lapsed.
func (l *SlotLedger) removableAt(le *SlotLease) int64 {
	return lastExpiry(le.Replaced, l.reclaimAt(le))
}

func (l *SlotLedger) heldExcept(skip int, nowNanos int64) int64 {
	var h int64
	for i := range l.s.Leases {
		if i != skip {
			h += l.s.Leases[i].HeldAt(nowNanos)
		}
	}
	return h
}

// heldWithoutUnackedCuts is Σ held counting each lease's current count,
// not the larger counts of the versions its holder has yet to acknowledge.
func (l *SlotLedger) heldWithoutUnackedCuts() int64 {
	var h int64
	for i := range l.s.Leases {
		le := &l.s.Leases[i]
		h += max(le.Current.Slots, 0) + le.replacedAt(l.s.NowNanos)
	}
	return h
}

// table is the slot ledger's holders table (holders.go).
func (l *SlotLedger) table() holders[SlotLease, *SlotLease] {
	return holders[SlotLease, *SlotLease]{rows: &l.s.Leases, now: &l.s.NowNanos, nextID: &l.s.NextID, kind: "slot lease", search: searchSlotLeases}
}

func (l *SlotLedger) advance(nowNanos int64) error {
	if err := checkTime(nowNanos); err != nil {
		return err
	}
	if err := l.table().notBefore(nowNanos); err != nil {
		return err
	}
	l.s.NowNanos = nowNanos
	return nil
}

// SlotGrantRequest asks for a new slot lease.
type SlotGrantRequest struct {
	ClientID    string
	Incarnation uint64
	Seq         uint64 // as GrantRequest.Seq
	Weight      int64  // >= 1; 0 means 1
	DemandSlots int64  // how many slots the client wants, >= 0
	TTLNanos    int64
}

// SlotRenewRequest extends a slot lease with a fresh demand.
type SlotRenewRequest struct {
	ClientID    string
	Incarnation uint64
	LeaseID     LeaseID
	Weight      int64
	DemandSlots int64
	TTLNanos    int64
	// AckedVersion is the latest version whose count the client's running
	// requests had dropped to (and, from then on, never exceeded) when it
	// sent this renewal: the version it has installed. Superseded versions
	// strictly older are dropped. Above the lease's current version it is
	// ignored.
	AckedVersion uint64
}

// SlotReleaseRequest returns a slot lease; sent only after every request
// started under it has ended.
type SlotReleaseRequest struct {
	ClientID    string
	Incarnation uint64
	LeaseID     LeaseID
}

// SlotGrant is the answer to a grant or renewal.
type SlotGrant struct {
	LeaseID      LeaseID
	Slots        int64 // run at most this many requests at once
	Version      uint64
	ExpiresNanos int64
	// TTLNanos is ExpiresNanos minus this operation's cluster time: the
	// client may start requests until ClientDeadline(send, TTLNanos, ρ),
	// and (with max_duration) only those that end by then.
	TTLNanos int64
	// AckSoon: this lease holds a superseded count above the new one,
	// which the client's acknowledgement frees: renew as soon as the
	// running requests have dropped to Slots.
	AckSoon bool
	// RenewSoon: the lease got less than it asked for while others hold
	// lowered counts not yet acknowledged: renew early to take them.
	RenewSoon bool
}

// validateSlotAsk checks a slot grant's or renewal's holder, demand and
// cluster time, in that order.
func validateSlotAsk(nowNanos int64, clientID string, ttl, weight, demand int64) error {
	if err := validateHolder(clientID, ttl); err != nil {
		return err
	}
	if err := validateSlotDemand(weight, demand); err != nil {
		return err
	}
	return checkTime(nowNanos)
}

func validateSlotDemand(weight, demand int64) error {
	if weight < 0 || weight > 1<<20 {
		return fmt.Errorf("%w: weight %d is outside [0, %d]", ErrInvalidRequest, weight, 1<<20)
	}
	if demand < 0 || demand > MaxSlots {
		return fmt.Errorf("%w: slot demand %d is outside [0, %d]", ErrInvalidRequest, demand, MaxSlots)
	}
	return nil
}

// target is lease i's fair share of N by weighted max-min fairness over
// every live lease's demand.
func (l *SlotLedger) target(i int) (int64, error) {
	claims := make([]fairClaim, len(l.s.Leases))
	for j := range l.s.Leases {
		le := &l.s.Leases[j]
		claims[j] = fairClaim{ID: le.ClientID, Demand: min(le.DemandSlots, l.s.Config.Limit), Weight: le.Weight}
	}
	shares, err := fairShares(l.s.Config.Limit, claims)
	if err != nil {
		return 0, err
	}
	return shares[i], nil
}

// slotsFor computes lease i's new count: its fair share, but never more
// than the slots nobody else holds (rule S3), nor more than it asked. A
// lease whose fair share is below what it runs keeps nothing it does not
// get: the lowering is held until acknowledged (S2), so a lower grant is
// always safe.
func (l *SlotLedger) slotsFor(i int) (int64, error) {
	if l.s.HoldAllUntilNanos > l.s.NowNanos {
		return 0, nil
	}
	t, err := l.target(i)
	if err != nil {
		return 0, err
	}
	le := &l.s.Leases[i]
	room := l.s.Config.Limit - l.heldExcept(i, l.s.NowNanos) - le.replacedAt(l.s.NowNanos)
	return max(0, min(t, le.DemandSlots, room)), nil
}

// Grant creates a slot lease for (ClientID, Incarnation) at cluster time
// now; an existing lease of the same holder is replaced (rule S6).
func (l *SlotLedger) Grant(nowNanos int64, req SlotGrantRequest) (SlotGrant, error) {
	if err := validateSlotAsk(nowNanos, req.ClientID, req.TTLNanos, req.Weight, req.DemandSlots); err != nil {
		return SlotGrant{}, err
	}
	i, exists, err := l.table().admit(nowNanos, req.ClientID, req.Incarnation, req.Seq, l.s.Config.maxLeases())
	if err != nil {
		return SlotGrant{}, err
	}
	if err := l.advance(nowNanos); err != nil {
		return SlotGrant{}, err
	}
	le := SlotLease{ID: l.s.NextID, ClientID: req.ClientID, Incarnation: req.Incarnation, GrantSeq: req.Seq, Weight: req.Weight, DemandSlots: req.DemandSlots}
	if exists && !l.has(slotFaultForgetReplaced) {
		le.Replaced = replacedSlots(&l.s.Leases[i], nowNanos)
	}
	l.table().put(i, exists, le)
	slots, err := l.slotsFor(i)
	if err != nil {
		return SlotGrant{}, err // unreachable: inputs were validated
	}
	l.s.NextID++
	cur := &l.s.Leases[i]
	cur.Current = SlotShare{Slots: slots, ExpiresNanos: nowNanos + req.TTLNanos, Version: 1}
	cur.LastTTLNanos = req.TTLNanos
	if exists {
		l.markOvercommit()
	}
	return SlotGrant{LeaseID: cur.ID, Slots: slots, Version: 1, ExpiresNanos: cur.Current.ExpiresNanos, TTLNanos: req.TTLNanos,
		RenewSoon: l.converging(i)}, nil
}

// replacedSlots is what a replaced live lease keeps held (rule S6,
// replacedHolds): its held count until its expiry, plus its own replaced
// entries still held.
func replacedSlots(old *SlotLease, nowNanos int64) []SlotShare {
	s := old.ownHeld()
	return replacedHolds(old.Replaced, SlotShare{Slots: s, ExpiresNanos: old.Current.ExpiresNanos}, old.Current.ExpiresNanos > nowNanos && s > 0, nowNanos)
}

// Renew extends a live slot lease with a fresh demand. A raise comes from
// free slots (S3); a lowering keeps the old count held until acknowledged
// (S2). The expiry never moves earlier.
func (l *SlotLedger) Renew(nowNanos int64, req SlotRenewRequest) (SlotGrant, error) {
	if err := validateSlotAsk(nowNanos, req.ClientID, req.TTLNanos, req.Weight, req.DemandSlots); err != nil {
		return SlotGrant{}, err
	}
	i, err := l.table().lookup(nowNanos, req.ClientID, req.Incarnation, req.LeaseID, true)
	if err != nil {
		return SlotGrant{}, err
	}
	if e := l.reclaimAt(&l.s.Leases[i]); e <= nowNanos {
		return SlotGrant{}, l.table().expired(req.LeaseID, e, nowNanos)
	}
	if err := l.advance(nowNanos); err != nil {
		return SlotGrant{}, err
	}
	cur := &l.s.Leases[i]
	cur.Weight, cur.DemandSlots = req.Weight, req.DemandSlots
	old := cur.Current
	// The acknowledgement first: it drops the versions older than the
	// one the client had drained to when it sent this renewal.
	if req.AckedVersion <= old.Version {
		cur.Superseded = dropAckedSlots(cur.Superseded, req.AckedVersion, l.fault)
		if l.has(slotFaultAckDropsAcked) && req.AckedVersion == old.Version {
			// The deliberate bug: the acknowledged count is the one the
			// client runs under; dropping it lets the new (lower) count
			// alone be held.
			old.Slots = 0
		}
	}
	// The current count becomes superseded and stays held (S2), even when
	// this renewal acknowledges it: the client runs under it until it has
	// installed the answer and drained to the new count.
	if !l.has(SlotFaultForgetLowered) {
		cur.Superseded = append(cur.Superseded, SlotShare{Slots: old.Slots, Version: old.Version})
	}
	cur.Current = SlotShare{Slots: 0, ExpiresNanos: max(old.ExpiresNanos, nowNanos+req.TTLNanos), Version: old.Version + 1}
	cur.LastTTLNanos = req.TTLNanos
	slots, err := l.slotsFor(i)
	if err != nil {
		return SlotGrant{}, err
	}
	// slotsFor left this lease's own superseded counts out of the room:
	// the client runs under one count at a time, so the held maximum,
	// not the sum, is what S1 adds up.
	cur.Current.Slots = slots
	cur.Superseded = pruneSlotShares(cur.Superseded, slots)
	return SlotGrant{LeaseID: cur.ID, Slots: slots, Version: cur.Current.Version, ExpiresNanos: cur.Current.ExpiresNanos,
		TTLNanos: cur.Current.ExpiresNanos - nowNanos, AckSoon: len(cur.Superseded) > 0, RenewSoon: l.converging(i)}, nil
}

// dropAckedSlots drops the superseded versions strictly older than acked:
// the client's running requests had dropped to acked's count before it
// sent the renewal, and it never again exceeds it under older versions.
func dropAckedSlots(ss []SlotShare, acked uint64, fault SlotFault) []SlotShare {
	return dropVersions(ss, acked, func(v uint64) bool {
		if faultsBuilt && fault == slotFaultAckDropsAcked {
			return v <= acked
		}
		return v < acked
	})
}

// pruneSlotShares keeps only superseded versions above the current count
// (lower ones add nothing to the maximum), and of those only the ones not
// dominated by a newer, larger one: the held maximum is unchanged, and the
// list stays short.
func pruneSlotShares(ss []SlotShare, cur int64) []SlotShare {
	out := ss[:0]
	for _, s := range ss {
		if s.Slots > cur {
			out = append(out, s)
		}
	}
	// Keep at most the versions needed for the maximum after any future
	// acknowledgement: for each kept version, no newer version is at least
	// as large (an ack that drops the older one keeps the newer one).
	kept := out[:0]
	for j, s := range out {
		dominated := false
		for _, t := range out[j+1:] {
			if t.Slots >= s.Slots {
				dominated = true
				break
			}
		}
		if !dominated {
			kept = append(kept, s)
		}
	}
	return kept
}

// converging reports whether lease i gets less than it asks for while
// another lease holds a lowered count not yet acknowledged (it waits for
// those slots) or holds more than its fair share.
func (l *SlotLedger) converging(i int) bool {
	me := &l.s.Leases[i]
	if me.Current.Slots >= min(me.DemandSlots, l.s.Config.Limit) {
		return false
	}
	for j := range l.s.Leases {
		if j != i && len(l.s.Leases[j].Superseded) > 0 {
			return true
		}
	}
	t, err := l.target(i)
	return err == nil && me.Current.Slots < t
}

// Release ends a slot lease whose client has stopped starting requests
// under it and whose requests have all ended (S4).
func (l *SlotLedger) Release(nowNanos int64, req SlotReleaseRequest) error {
	if req.ClientID == "" {
		return fmt.Errorf("%w: client ID is empty", ErrInvalidRequest)
	}
	if err := checkTime(nowNanos); err != nil {
		return err
	}
	i, err := l.table().lookup(nowNanos, req.ClientID, req.Incarnation, req.LeaseID, false)
	if err != nil {
		return err
	}
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	if le := &l.s.Leases[i]; len(le.Replaced) > 0 && !l.has(slotFaultForgetReplaced) {
		// S6 outlives the release: a placeholder under a fresh ID holds
		// only the replaced slots until their expiry.
		le.ID = l.table().takeID()
		le.Current = SlotShare{ExpiresNanos: lastExpiry(le.Replaced, 0)}
		le.Superseded = nil
		le.DemandSlots = 0
	} else {
		l.s.Leases = append(l.s.Leases[:i], l.s.Leases[i+1:]...)
	}
	return nil
}

// Expire removes every lease whose expiry (and every replaced hold) is at
// or before now, freeing its slots (S5). It returns the removed IDs in
// holder order. Until it runs, an expired lease still counts as held: the
// expiry is a log entry the leader proposes at NextExpiry, not a timer.
func (l *SlotLedger) Expire(nowNanos int64) ([]LeaseID, error) {
	return l.ExpireThrough(nowNanos, nowNanos)
}

// ExpireThrough advances to now but removes only leases whose expiry is at
// or before throughNanos (<= now): a new leader expires inherited leases a
// margin late, as with Ledger.ExpireThrough.
func (l *SlotLedger) ExpireThrough(nowNanos, throughNanos int64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	through := min(throughNanos, nowNanos)
	return l.removeLeases(func(le *SlotLease) bool { return l.removableAt(le) <= through }), nil
}

func (l *SlotLedger) removeLeases(gone func(*SlotLease) bool) []LeaseID {
	return l.table().removeWhere(gone)
}

// Revoke frees every lease of clientID whose incarnation is below
// incarnation: that process is gone, and its requests with it.
func (l *SlotLedger) Revoke(nowNanos int64, clientID string, incarnation uint64) ([]LeaseID, error) {
	if err := l.advance(nowNanos); err != nil {
		return nil, err
	}
	return l.removeLeases(func(le *SlotLease) bool { return le.ClientID == clientID && le.Incarnation < incarnation }), nil
}

// HoldAll applies rule (j) after a snapshot restore at cluster time now:
// until untilNanos (the current time plus the longest lease duration)
// every slot counts as held by leases the restored state does not know, so
// grants and renewals get none. The restored leases are dropped too: their
// versions may collide with versions the replaced state issued since the
// snapshot, so an acknowledgement naming one could free a count the holder
// still runs under. Their holders' renewals are refused (the IDs are gone),
// so they start nothing more, and what they run ends by their deadlines,
// which fall before untilNanos (with max_duration or the deadline-cancel
// rule; otherwise it is ε_over).
func (l *SlotLedger) HoldAll(nowNanos, untilNanos int64) error {
	if err := checkTime(untilNanos); err != nil {
		return err // before advancing: a failed call changes nothing
	}
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	l.s.HoldAllUntilNanos = max(l.s.HoldAllUntilNanos, untilNanos)
	l.s.Leases = nil
	return nil
}

// RaiseNextID makes the next lease ID at least min (after a restore).
func (l *SlotLedger) RaiseNextID(min LeaseID) { l.s.NextID = max(l.s.NextID, min) }

// Reconfigure changes N at cluster time now. Leases keep their counts
// until renewed; if N shrank, S1 holds against the old limit until the
// last lease granted under it has expired.
func (l *SlotLedger) Reconfigure(nowNanos int64, cfg SlotConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := l.advance(nowNanos); err != nil {
		return err
	}
	l.s.Config = cfg
	l.markOvercommit()
	return nil
}

// markOvercommit records, when the leases hold more than N, that S1 holds
// only against the limit they were granted under until the last of them
// has expired.
func (l *SlotLedger) markOvercommit() {
	if l.heldTotal() <= l.s.Config.Limit {
		return
	}
	l.s.OvercommitUntilNanos = l.table().lastHold(l.s.OvercommitUntilNanos)
}

func (l *SlotLedger) overcommitted() bool {
	return l.table().overcommitted(l.s.OvercommitUntilNanos)
}

// CheckInvariants verifies S1 and the structural invariants at the latest
// operation's time. It returns nil for every reachable state.
func (l *SlotLedger) CheckInvariants() error {
	s := &l.s
	if h := l.heldTotal(); h > s.Config.Limit && !l.overcommitted() {
		// A cut not acknowledged yet stays held (rule S2: the holder's
		// requests may still run under the count it had) however long the
		// holder keeps renewing, so after N was lowered the excess may
		// outlive the old leases' expiry; every count granted since fits
		// N, so S1 holds counting each lease's current count.
		if c := l.heldWithoutUnackedCuts(); c > s.Config.Limit {
			return fmt.Errorf("rule S1: held slots %d (%d without unacknowledged cuts) exceed N %d", h, c, s.Config.Limit)
		}
	}
	for i := range s.Leases {
		if err := l.table().checkRow(i); err != nil {
			return err
		}
		le := &s.Leases[i]
		if len(le.Replaced) > maxReplaced {
			return fmt.Errorf("slot lease %d holds %d replaced leases, more than %d", le.ID, len(le.Replaced), maxReplaced)
		}
		for _, sh := range append(append([]SlotShare{le.Current}, le.Superseded...), le.Replaced...) {
			if sh.Slots < 0 || sh.Slots > MaxSlots {
				return fmt.Errorf("slot lease %d has a count outside [0, %d]: %+v", le.ID, MaxSlots, sh)
			}
		}
		for _, sh := range le.Superseded {
			if sh.Version >= le.Current.Version {
				return fmt.Errorf("slot lease %d keeps superseded version %d at or above its current %d", le.ID, sh.Version, le.Current.Version)
			}
		}
	}
	return nil
}
