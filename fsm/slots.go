package fsm

import (
	"fmt"
	"slices"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Cluster-wide concurrency limits (docs/concurrency.md). With
// FeatureConcurrency on, a concurrency policy's keys are lease.SlotLedgers,
// kept here beside the token and window ledgers; the lease batch's acquire,
// renew and release ops carry slot leases (no new command type), and
// revoke, expire, snapshots and restores reach them as the slot kind
// (kinds.go). Their due index (dueindex.go) makes an expire and a
// revocation cost what is due or held, not the number of slot keys.
//
// On the wire a slot lease is a Grant with slot_lease set: slot_count s
// (and cap_milli s·1000), the version the client acknowledges at renewals
// (RenewKey.acked_version) once its running requests have dropped to s,
// and the policy's rules. The demand's burst_milli is the slots asked for
// (running plus queued requests), in whole requests, rounded up.

// faultSlotSnapshotDropsKeys: snapshots leave out the slot keys, so a
// restarted or caught-up server forgets every held slot (the fsm slot
// tests' negative control). Outside fault.go's sequence.
const faultSlotSnapshotDropsKeys fault = 0x50

var _ = registerFault(faultSlotSnapshotDropsKeys, "faultSlotSnapshotDropsKeys")

// Slot lease settings: a concurrency policy has no lease section; its
// slot leases last slotLeaseNanos, renewed after a third of it, with the
// default drift bound (what policy validation checks max_duration and
// cancel_grace against).
const (
	slotLeaseNanos = int64(policy.DefaultLeaseDuration)
	slotDriftPPM   = policy.DefaultDriftPPM
)

type slotState struct {
	keys map[string]map[string]*lease.SlotLedger
	// attrs: the key attributes each name's keys were made under.
	attrs map[string][]string

	// Derived, never serialized (rebuilt on import). idx: the slot keys
	// holding leases, due at their earliest lease expiry (NextExpiry), and
	// their holders; idle: those holding none, due when their restore
	// hold ends (they are collected then). An expire and a revoke visit
	// only what these say (dueindex.go).
	idx, idle dueIndex[*lease.SlotLedger]
	// sweptAt: the cluster time of the latest expire or revoke. Both once
	// advanced every slot ledger's clock to their time; now they visit
	// only the due (or held) keys, and a ledger's clock as a snapshot or a
	// listing shows it is max(its own, sweptAt) (slotNow), as before.
	sweptAt int64
	// holders: slotTouch's scratch slice (never stored).
	holders []string
	// scanRef: expire and revoke scan every key (tests' reference).
	scanRef bool
}

// slotNow is a slot ledger's clock as the state shows it: its own, or the
// latest expire's or revoke's if later (slotState.sweptAt).
func (s *state) slotNow(l *lease.SlotLedger) int64 { return max(l.NowNanos(), s.slots.sweptAt) }

// slotFree is lease.SlotLedger.Free at the ledger's clock as the state
// shows it (slotNow).
func (s *state) slotFree(l *lease.SlotLedger) int64 {
	now, st := s.slotNow(l), l.State()
	if st.HoldAllUntilNanos > now {
		return 0
	}
	held := int64(0)
	for _, le := range st.Leases {
		held += le.HeldAt(now)
	}
	return max(0, st.Config.Limit-held)
}

// sweep notes an expire or revoke at t that once advanced every slot
// ledger's clock to t (when t is a time a ledger accepts; otherwise none
// advanced).
func (s *state) sweep(t int64) {
	if t >= 0 && t <= lease.MaxTimeNanos {
		s.slots.sweptAt = max(s.slots.sweptAt, t)
	}
}

// slotTouch re-indexes a slot key after its ledger changed (or was
// created).
func (s *state) slotTouch(name, key string, l *lease.SlotLedger) {
	if l.LeaseCount() == 0 {
		s.slots.idx.untrack(name, key)
		s.slots.idle.touch(name, key, l, l.HoldAllUntilNanos())
		return
	}
	s.slots.idle.untrack(name, key)
	due, _ := l.NextExpiry()
	it := s.slots.idx.touch(name, key, l, due)
	// The holders into a scratch slice: setHolders copies them only when
	// they changed, so an op that keeps a key's holders allocates nothing.
	s.slots.holders = l.AppendHolders(s.slots.holders[:0])
	s.slots.idx.setHolders(it, s.slots.holders)
}

// slotUntrack forgets a slot key (collected or dropped).
func (s *state) slotUntrack(name, key string) {
	s.slots.idx.untrack(name, key)
	s.slots.idle.untrack(name, key)
}

// rebuildSlotIndex builds the slot indexes from the replicated state.
func (s *state) rebuildSlotIndex() {
	s.slots.idx, s.slots.idle = dueIndex[*lease.SlotLedger]{}, dueIndex[*lease.SlotLedger]{}
	for pn, keys := range s.slots.keys {
		for ck, l := range keys {
			s.slotTouch(pn, ck, l)
		}
	}
}

func slotConfig(p policy.Policy) lease.SlotConfig {
	return lease.SlotConfig{Limit: p.LimitMilli / lease.MilliPerToken, MaxLeases: int(p.MaxLeasesPerKey), DriftPPM: slotDriftPPM}
}

// slotLedger finds (or, with create, makes) a slot key's ledger, and
// applies the policy's current limit to it (lease.SlotLedger.Reconfigure).
func (s *state) slotLedger(t int64, p policy.Policy, k *api.Key, create bool) (string, *lease.SlotLedger, error) {
	ck, err := p.CanonicalKey(k.GetAttributes())
	if err != nil {
		return "", nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	cfg := slotConfig(p)
	l := s.slots.keys[p.Name][ck]
	if l == nil {
		if !create {
			return ck, nil, fmt.Errorf("%w: policy %q has no key %q", lease.ErrLeaseNotFound, p.Name, ck)
		}
		if int64(len(s.slots.keys[p.Name])) >= p.MaxKeys {
			s.collectSlots(t, p.Name)
		}
		if int64(len(s.slots.keys[p.Name])) >= p.MaxKeys {
			return ck, nil, fmt.Errorf("%w: policy %q already tracks max_keys=%d keys", rpcerr.ErrResourceExhausted, p.Name, p.MaxKeys)
		}
		if l, err = lease.NewSlotLedger(cfg, t); err != nil {
			return ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		l = withSlotFault(l)
		if s.idGeneration > 0 {
			l.RaiseNextID(s.firstLeaseID())
		}
		if s.restoreHoldUntil > t {
			if err := l.HoldAll(t, s.restoreHoldUntil); err != nil {
				return ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
			}
		}
		if s.slots.keys == nil {
			s.slots.keys = map[string]map[string]*lease.SlotLedger{}
			s.slots.attrs = map[string][]string{}
		}
		if s.slots.keys[p.Name] == nil {
			s.slots.keys[p.Name] = map[string]*lease.SlotLedger{}
		}
		s.slots.keys[p.Name][ck] = l
		s.slots.attrs[p.Name] = slices.Clone(p.Key)
		s.slotTouch(p.Name, ck, l)
	}
	if l.Config() != cfg {
		err := l.Reconfigure(max(t, l.NowNanos()), cfg)
		s.slotTouch(p.Name, ck, l)
		if err != nil {
			return ck, nil, fmt.Errorf("policy %q key %q: %w", p.Name, ck, err)
		}
	}
	return ck, l, nil
}

// slotIdle: no lease (replaced holds included) and no restore hold: the
// ledger is indistinguishable from a fresh one but for its next ID.
func slotIdle(l *lease.SlotLedger, t int64) bool {
	return l.LeaseCount() == 0 && l.HoldAllUntilNanos() <= t
}

// collectSlots drops a policy's idle slot keys.
func (s *state) collectSlots(t int64, name string) {
	for _, ck := range sortedKeys(s.slots.keys[name]) {
		if slotIdle(s.slots.keys[name][ck], t) {
			s.slotUntrack(name, ck)
			delete(s.slots.keys[name], ck)
		}
	}
	if len(s.slots.keys[name]) == 0 {
		delete(s.slots.keys, name)
		delete(s.slots.attrs, name)
	}
}

// slotDemand is the slots a demand asks for: its burst in whole requests,
// rounded up, at most lease.MaxSlots.
func slotDemand(d *api.Demand) int64 {
	b := max(d.GetBurstMilli(), 0)
	return min((b+lease.MilliPerToken-1)/lease.MilliPerToken, lease.MaxSlots)
}

func slotGrantProto(p policy.Policy, ck string, g lease.SlotGrant) *api.Grant {
	renewAfter := slotLeaseNanos / policy.DefaultRenewDivisor
	if g.RenewSoon {
		renewAfter = MinEarlyRenewNanos
	}
	return &api.Grant{
		LeaseId:              uint64(g.LeaseID),
		CapMilli:             g.Slots * lease.MilliPerToken,
		TtlNanos:             g.TTLNanos,
		RenewAfterNanos:      min(renewAfter, g.TTLNanos),
		DriftPpm:             slotDriftPPM,
		FailureMode:          string(policy.FailClosed),
		Shadow:               p.Shadow,
		CanonicalKey:         ck,
		Version:              g.Version,
		KeyAttributes:        append([]string(nil), p.Key...),
		KeyAttributesSet:     true,
		PolicyBurstMilli:     p.LimitMilli,
		SlotLease:            true,
		SlotCount:            g.Slots,
		SlotLimit:            p.LimitMilli / lease.MilliPerToken,
		SlotMaxDurationNanos: p.MaxDurationNanos,
		SlotCancelGraceNanos: p.CancelGraceNanos,
		SlotAckSoon:          g.AckSoon,
		SlotRenewSoon:        g.RenewSoon,
	}
}

// slotAcquire grants a slot lease.
func (s *state) slotAcquire(t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	ck, l, err := s.slotLedger(t, p, k.GetKey(), true)
	if err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	if seen[p.Name+"\x00"+ck] {
		return &api.KeyLease{Error: keyError(fmt.Errorf("%w: key %s/%s is listed twice in one request", rpcerr.ErrInvalid, p.Name, ck))}
	}
	seen[p.Name+"\x00"+ck] = true
	g, err := l.Grant(max(t, l.NowNanos()), lease.SlotGrantRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), Seq: c.GetSeq(),
		Weight: max(p.Weight(c.GetClientId()), 1), DemandSlots: slotDemand(k.GetDemand()), TTLNanos: slotLeaseNanos,
	})
	s.slotTouch(p.Name, ck, l)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	return &api.KeyLease{Grant: slotGrantProto(p, ck, g)}
}

// slotRenew extends a slot lease with a fresh demand and acknowledgement.
func (s *state) slotRenew(t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	ck, l, err := s.slotLedger(t, p, k.GetKey(), false)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	g, err := l.Renew(max(t, l.NowNanos()), lease.SlotRenewRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), LeaseID: lease.LeaseID(k.GetLeaseId()),
		Weight: max(p.Weight(c.GetClientId()), 1), DemandSlots: slotDemand(k.GetDemand()), TTLNanos: slotLeaseNanos,
		AckedVersion: k.GetAckedVersion(),
	})
	s.slotTouch(p.Name, ck, l)
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	return &api.KeyLease{Grant: slotGrantProto(p, ck, g)}
}

// slotRelease ends a slot lease (its holder runs nothing under it).
func (s *state) slotRelease(t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	p := s.policies[k.GetKey().GetPolicy()] // the kind's (kinds.go)
	r := &api.ReleaseResult{}
	ck, l, err := s.slotLedger(t, p, k.GetKey(), false)
	if err == nil {
		err = l.Release(max(t, l.NowNanos()), lease.SlotReleaseRequest{ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), LeaseID: lease.LeaseID(k.GetLeaseId())})
		s.slotTouch(p.Name, ck, l)
	}
	if err != nil {
		r.Error = keyError(err)
	}
	return r
}

// slotRevoke drops the slot leases of clientID's incarnations below
// incarnation: that process is gone, and its requests with it. It visits
// only the keys where the client holds leases (the index's byClient; the
// other keys' clocks advance through sweptAt).
func (s *state) slotRevoke(t int64, clientID string, incarnation uint64) {
	if s.slots.scanRef {
		s.slotRevokeScan(t, clientID, incarnation)
		return
	}
	for _, it := range s.slots.idx.heldBy(clientID) {
		_, _ = it.l.Revoke(max(t, it.l.NowNanos()), clientID, incarnation) // only a time error, excluded by max
		s.slotTouch(it.name, it.key, it.l)
	}
	s.sweep(t)
}

// slotRevokeScan is slotRevoke visiting every key (the reference).
func (s *state) slotRevokeScan(t int64, clientID string, incarnation uint64) {
	for _, pn := range sortedKeys(s.slots.keys) {
		for _, ck := range sortedKeys(s.slots.keys[pn]) {
			l := s.slots.keys[pn][ck]
			_, _ = l.Revoke(max(t, l.NowNanos()), clientID, incarnation)
			s.slotTouch(pn, ck, l)
		}
	}
	s.sweep(t)
}

// slotExpire removes the slot leases due by through and collects idle
// keys (every policy's, deleted ones included), visiting only the keys
// whose earliest lease expiry or hold end is due (the other keys' clocks
// advance through sweptAt).
func (s *state) slotExpire(t, through int64, res *Result) {
	if s.slots.scanRef {
		s.slotExpireScan(t, through, res)
		return
	}
	due := append(s.slots.idx.popDue(t), s.slots.idle.popDue(t)...)
	slices.SortFunc(due, byNameKey[*lease.SlotLedger])
	for _, it := range due {
		s.slotExpireKey(t, through, it.name, it.key, it.l, res)
	}
	s.sweep(t)
}

// slotExpireScan is slotExpire visiting every key (the reference).
func (s *state) slotExpireScan(t, through int64, res *Result) {
	for _, pn := range sortedKeys(s.slots.keys) {
		for _, ck := range sortedKeys(s.slots.keys[pn]) {
			s.slotExpireKey(t, through, pn, ck, s.slots.keys[pn][ck], res)
		}
	}
	s.sweep(t)
}

// slotExpireKey expires one slot key's leases due by through and collects
// it if it is then idle (the rule of the index and the scan alike).
func (s *state) slotExpireKey(t, through int64, pn, ck string, l *lease.SlotLedger, res *Result) {
	now := max(t, l.NowNanos())
	gone, err := l.ExpireThrough(now, min(through, now))
	if err == nil {
		res.expired(pn, len(gone))
	}
	if !slotIdle(l, t) {
		s.slotTouch(pn, ck, l)
		return
	}
	s.slotUntrack(pn, ck)
	delete(s.slots.keys[pn], ck)
	if len(s.slots.keys[pn]) == 0 {
		delete(s.slots.keys, pn)
		delete(s.slots.attrs, pn)
	}
}

// slotsNextDue is the earliest slot lease expiry (the leader proposes an
// expire entry then: a slot frees only at an expire entry). Idle keys'
// hold ends are not due times: they wait for the next expire.
func (s *state) slotsNextDue() (int64, bool) { return s.slots.idx.next() }

// slotCheckChange refuses a change that would key a name's slots
// differently (other key attributes, or another algorithm) while its keys
// hold leases: the old keys' holders still run requests the new keys would
// not count.
func (s *state) slotCheckChange(t int64, p policy.Policy) error {
	if s.slotKeysKept(p) {
		return nil
	}
	n := 0
	for _, l := range s.slots.keys[p.Name] {
		if !slotIdle(l, t) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: policy %q: %d concurrency keys hold slot leases; a concurrency policy whose key or algorithm changes can be applied once they have expired or been released",
		rpcerr.ErrPrecondition, p.Name, n)
}

func (s *state) slotKeysKept(p policy.Policy) bool {
	attrs, ok := s.slots.attrs[p.Name]
	return !ok || len(s.slots.keys[p.Name]) == 0 || p.Algorithm == policy.Concurrency && slices.Equal(attrs, p.Key)
}

// slotInstall drops a name's slot keys when its new definition keys them
// differently (slotCheckChange passed, so they are idle).
func (s *state) slotInstall(p policy.Policy) {
	if !s.slotKeysKept(p) {
		for ck := range s.slots.keys[p.Name] {
			s.slotUntrack(p.Name, ck)
		}
		delete(s.slots.keys, p.Name)
		delete(s.slots.attrs, p.Name)
	}
}

// slotsPrepareRestore applies rule (j) to every slot key of a restored
// state: every slot held until until, the restored leases dropped, lease
// IDs in the new generation.
func (s *state) slotsPrepareRestore(until int64) error {
	for _, pn := range sortedKeys(s.slots.keys) {
		for _, ck := range sortedKeys(s.slots.keys[pn]) {
			l := s.slots.keys[pn][ck]
			if err := l.HoldAll(max(s.clusterTime, l.NowNanos()), until); err != nil {
				return fmt.Errorf("fsm: prepare restore: slot key %s/%s: %w", pn, ck, err)
			}
			l.RaiseNextID(s.firstLeaseID())
		}
	}
	s.rebuildSlotIndex()
	return nil
}

func slotShareProto(v lease.SlotShare) *api.SlotShareSnapshot {
	return &api.SlotShareSnapshot{Slots: v.Slots, ExpiresNanos: v.ExpiresNanos, Version: v.Version}
}

func slotShareOf(v *api.SlotShareSnapshot) lease.SlotShare {
	return lease.SlotShare{Slots: v.GetSlots(), ExpiresNanos: v.GetExpiresNanos(), Version: v.GetVersion()}
}

// exportSlots is the state's frames of kind 7, one per key, sorted: built
// under the lock at a capture (the slot keys are not in the copy-on-write
// maps).
func (s *state) exportSlots() []*api.SlotFrame {
	if s.has(faultSlotSnapshotDropsKeys) {
		return nil
	}
	var out []*api.SlotFrame
	for _, pn := range sortedKeys(s.slots.keys) {
		for _, ck := range sortedKeys(s.slots.keys[pn]) {
			st := s.slots.keys[pn][ck].State()
			f := &api.SlotFrame{Policy: pn, Key: ck, Limit: st.Config.Limit, MaxLeases: int64(st.Config.MaxLeases), DriftPpm: st.Config.DriftPPM,
				NowNanos: max(st.NowNanos, s.slots.sweptAt), NextId: uint64(st.NextID), HoldAllUntilNanos: st.HoldAllUntilNanos, OvercommitUntilNanos: st.OvercommitUntilNanos,
				KeyAttributes: slices.Clone(s.slots.attrs[pn])}
			for _, le := range st.Leases {
				ls := &api.SlotLeaseSnapshot{Id: uint64(le.ID), ClientId: le.ClientID, Incarnation: le.Incarnation, GrantSeq: le.GrantSeq,
					Weight: le.Weight, DemandSlots: le.DemandSlots, Current: slotShareProto(le.Current), LastTtlNanos: le.LastTTLNanos}
				for _, v := range le.Superseded {
					ls.Superseded = append(ls.Superseded, slotShareProto(v))
				}
				for _, v := range le.Replaced {
					ls.Replaced = append(ls.Replaced, slotShareProto(v))
				}
				f.Leases = append(f.Leases, ls)
			}
			out = append(out, f)
		}
	}
	return out
}

// importSlots reads one frame of kind 7, checking the ledger's invariants.
func (st *state) importSlots(f *api.SlotFrame) error {
	ls := lease.SlotLedgerState{
		Config:   lease.SlotConfig{Limit: f.GetLimit(), MaxLeases: int(f.GetMaxLeases()), DriftPPM: f.GetDriftPpm()},
		NowNanos: f.GetNowNanos(), NextID: lease.LeaseID(f.GetNextId()),
		HoldAllUntilNanos: f.GetHoldAllUntilNanos(), OvercommitUntilNanos: f.GetOvercommitUntilNanos(),
	}
	for _, le := range f.GetLeases() {
		sl := lease.SlotLease{ID: lease.LeaseID(le.GetId()), ClientID: le.GetClientId(), Incarnation: le.GetIncarnation(), GrantSeq: le.GetGrantSeq(),
			Weight: le.GetWeight(), DemandSlots: le.GetDemandSlots(), Current: slotShareOf(le.GetCurrent()), LastTTLNanos: le.GetLastTtlNanos()}
		for _, v := range le.GetSuperseded() {
			sl.Superseded = append(sl.Superseded, slotShareOf(v))
		}
		for _, v := range le.GetReplaced() {
			sl.Replaced = append(sl.Replaced, slotShareOf(v))
		}
		if n := len(ls.Leases); n > 0 {
			prev := ls.Leases[n-1]
			if prev.ClientID > sl.ClientID || prev.ClientID == sl.ClientID && prev.Incarnation >= sl.Incarnation {
				return fmt.Errorf("%w: slot key %s/%s: leases out of order", errSnapshot, f.GetPolicy(), f.GetKey())
			}
		}
		ls.Leases = append(ls.Leases, sl)
	}
	l, err := lease.NewSlotLedgerFromState(ls)
	if err != nil {
		return fmt.Errorf("%w: slot key %s/%s: %w", errSnapshot, f.GetPolicy(), f.GetKey(), err)
	}
	l = withSlotFault(l)
	if st.slots.keys == nil {
		st.slots.keys = map[string]map[string]*lease.SlotLedger{}
		st.slots.attrs = map[string][]string{}
	}
	if st.slots.keys[f.GetPolicy()] == nil {
		st.slots.keys[f.GetPolicy()] = map[string]*lease.SlotLedger{}
	}
	if st.slots.keys[f.GetPolicy()][f.GetKey()] != nil {
		return fmt.Errorf("%w: slot key %s/%s is listed twice", errSnapshot, f.GetPolicy(), f.GetKey())
	}
	if old, ok := st.slots.attrs[f.GetPolicy()]; ok && !slices.Equal(old, f.GetKeyAttributes()) {
		return fmt.Errorf("%w: slot keys of %s made under two keyings", errSnapshot, f.GetPolicy())
	}
	st.slots.keys[f.GetPolicy()][f.GetKey()] = l
	st.slots.attrs[f.GetPolicy()] = slices.Clone(f.GetKeyAttributes())
	return nil
}

// slotListing adds the slot keys and their leases to a listing: a key's N
// as its capacity, a lease's slots as its cap (whole requests ·1000) and
// its held slots as its held cap.
func (s *state) slotListing(out *api.ListLeasesResponse, policyName, key string, now int64) {
	for _, pn := range sortedKeys(s.slots.keys) {
		if policyName != "" && pn != policyName {
			continue
		}
		for _, ck := range sortedKeys(s.slots.keys[pn]) {
			if key != "" && ck != key {
				continue
			}
			l := s.slots.keys[pn][ck]
			out.Keys = append(out.Keys, &api.KeyInfo{Policy: pn, Key: ck, CapacityMilli: l.Config().Limit * lease.MilliPerToken,
				PoolMilli: s.slotFree(l) * lease.MilliPerToken})
			for _, le := range l.Leases() {
				out.Leases = append(out.Leases, &api.LeaseInfo{Policy: pn, Key: ck, ClientId: le.ClientID, Incarnation: le.Incarnation,
					LeaseId: uint64(le.ID), CapMilli: le.Current.Slots * lease.MilliPerToken, HeldCapMilli: le.HeldAt(s.slotNow(l)) * lease.MilliPerToken,
					ExpiresNanos: le.Current.ExpiresNanos, ExpiresInNanos: le.Current.ExpiresNanos - now})
			}
		}
	}
}

// slotsLeaseNanos is the slot lease duration if the restored state or the
// current policies have any concurrency key or policy, else 0: the
// restore hold lasts at least that long.
func (s *state) slotsLeaseNanos(current []policy.Policy) int64 {
	if len(s.slots.keys) > 0 {
		return slotLeaseNanos
	}
	for _, p := range current {
		if p.Algorithm == policy.Concurrency {
			return slotLeaseNanos
		}
	}
	for _, p := range s.policies {
		if p.Algorithm == policy.Concurrency {
			return slotLeaseNanos
		}
	}
	return 0
}
