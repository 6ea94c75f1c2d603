package fsm

import (
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/protobuf/proto"
)

// One lease protocol, three kinds. A policy's algorithm chooses the kind
// of ledger its keys have: token buckets (lease.Ledger; fsm.go, index.go,
// retire.go), leased windows (lease.WindowLedger; window.go,
// windowindex.go) and concurrency slots (lease.SlotLedger; slots.go). The
// lease batch's ops, expiry, revocation, policy changes, listings,
// snapshots and restores reach a kind only through this interface: one
// lookup (kindOf) where a key names a policy, one loop over kinds where
// every kind takes part.
//
// The order of kinds is the order of their effects: token buckets first,
// then windows, then slots. Snapshot frames are written in it, and a
// listing lists keys in it.
type kind interface {
	// owns reports whether p's keys are this kind's. The token-bucket kind
	// owns what no other kind owns, and answers for unknown policies.
	owns(p policy.Policy) bool

	// acquire, renew and release serve one key of a lease op.
	acquire(s *state, t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease
	renew(s *state, t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease
	release(s *state, t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult
	// revoke frees the leases of clientID's incarnations below incarnation.
	revoke(s *state, t int64, clientID string, incarnation uint64)
	// expire removes the leases due by through and collects idle keys,
	// adding what it removed to res.
	expire(s *state, t, through, retention int64, res *Result) error
	// nextDue is the earliest cluster time its expire has work.
	nextDue(s *state) (int64, bool)

	// checkChange refuses a definition p the kind's keys cannot take yet;
	// install applies it (after every kind's checkChange passed).
	checkChange(s *state, t int64, p policy.Policy) error
	install(s *state, t int64, p policy.Policy) error

	// usage counts a policy's keys and leases; listing appends them.
	usage(s *state, name string) (keys, leases int)
	listing(s *state, out *api.ListLeasesResponse, policyName, key string, now int64)

	// frames is the kind's part of a capture taken under the lock (the
	// token buckets' ledgers are captured copy-on-write instead: nil);
	// restorers read the kind's frames back (snapshot.go), by frame kind.
	frames(s *state) []kindFrame
	restorers() map[byte]frameRestorer
	// prepareRestore applies rule (j) to the kind's keys of a restored
	// state (restore.go); leaseNanos is the longest lease the kind's keys
	// of st or the current policies may hold.
	prepareRestore(st *state, base RestoreBase, snapTime, until int64) error
	leaseNanos(st *state, current []policy.Policy) int64
	// rebuildIndex rebuilds the kind's derived indexes (never serialized).
	rebuildIndex(s *state)
}

// kindFrame is one snapshot frame a kind's capture holds.
type kindFrame struct {
	kind byte
	msg  proto.Message
}

// kinds is every kind, in the order of their effects.
var kinds = [...]kind{tokenKind{}, windowKind{}, slotKind{}}

// kindOf is the kind of the policy a key names (token buckets for an
// unknown one: that kind's errors say so).
func (s *state) kindOf(k *api.Key) kind {
	if p, ok := s.policies[k.GetPolicy()]; ok {
		for _, kd := range kinds[1:] {
			if kd.owns(p) {
				return kd
			}
		}
	}
	return kinds[0]
}

// tokenKind: token buckets (lease.Ledger), with the copy-on-write key maps
// (cow.go), the due and holder indexes (index.go) and retired budgets
// (retire.go).
type tokenKind struct{}

func (tokenKind) owns(p policy.Policy) bool {
	return !leasedWindow(p.Algorithm) && p.Algorithm != policy.Concurrency
}

func (tokenKind) acquire(s *state, t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	return s.tokenAcquire(t, c, k, seen)
}

func (tokenKind) renew(s *state, t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	return s.tokenRenew(t, c, k)
}

func (tokenKind) release(s *state, t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	return s.tokenRelease(t, c, k)
}

func (tokenKind) revoke(s *state, t int64, clientID string, incarnation uint64) {
	if s.ref != nil {
		s.ref.revoke(s, t, clientID, incarnation)
		return
	}
	s.revokeIndexed(t, clientID, incarnation)
}

func (tokenKind) expire(s *state, t, through, retention int64, res *Result) error {
	var r *Result
	var err error
	if s.ref != nil {
		r, err = s.ref.expire(s, t, through, retention)
	} else {
		r, err = s.expireIndexed(t, through, retention)
	}
	if err != nil {
		return err
	}
	res.Expired += r.Expired
	for pn, n := range r.ExpiredByPolicy {
		if res.ExpiredByPolicy == nil {
			res.ExpiredByPolicy = map[string]int{}
		}
		res.ExpiredByPolicy[pn] += n
	}
	return nil
}

func (tokenKind) nextDue(s *state) (int64, bool) {
	if len(s.idx.due) == 0 {
		return 0, false
	}
	return s.idx.due[0].due, true
}

func (tokenKind) checkChange(s *state, _ int64, p policy.Policy) error { return s.checkChange(p) }
func (tokenKind) install(s *state, t int64, p policy.Policy) error     { return s.install(t, p) }

func (tokenKind) usage(s *state, name string) (keys, leases int) {
	for _, kl := range s.keys[name].all() {
		keys++
		leases += kl.ledger.LeaseCount()
	}
	return keys, leases
}

func (tokenKind) listing(s *state, out *api.ListLeasesResponse, policyName, key string, now int64) {
	s.tokenListing(out, policyName, key, now)
}

func (tokenKind) frames(*state) []kindFrame { return nil }

func (tokenKind) restorers() map[byte]frameRestorer {
	return map[byte]frameRestorer{
		frameLedger:  restoreFrame("ledger", (*state).importLiveLedger),
		frameRetired: restoreFrame("retired ledger", addRetiredLedger),
	}
}

func (tokenKind) prepareRestore(st *state, _ RestoreBase, _, until int64) error {
	return st.tokensPrepareRestore(until)
}

func (tokenKind) leaseNanos(st *state, current []policy.Policy) int64 {
	longest := int64(0)
	for _, p := range current {
		longest = max(longest, p.LeaseDurationNanos)
	}
	for _, p := range st.policies {
		longest = max(longest, p.LeaseDurationNanos)
	}
	for _, r := range st.retired {
		if r.spec != nil {
			longest = max(longest, r.spec.LeaseDurationNanos)
		}
	}
	return longest
}

func (tokenKind) rebuildIndex(s *state) { s.rebuildTokenIndex() }

// windowKind: leased fixed and approximate sliding windows
// (lease.WindowLedger; window.go, windowindex.go).
type windowKind struct{}

func (windowKind) owns(p policy.Policy) bool { return leasedWindow(p.Algorithm) }

func (windowKind) acquire(s *state, t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	return s.windowAcquire(t, c, k, seen)
}

func (windowKind) renew(s *state, t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	return s.windowRenew(t, c, k)
}

func (windowKind) release(s *state, t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	return s.windowRelease(t, c, k)
}

func (windowKind) revoke(s *state, _ int64, clientID string, incarnation uint64) {
	s.windowRevoke(clientID, incarnation)
}

func (windowKind) expire(s *state, t, _, _ int64, res *Result) error {
	s.windowExpire(t, res)
	return nil
}

func (windowKind) nextDue(s *state) (int64, bool) { return s.windowNextDue() }

func (windowKind) checkChange(s *state, t int64, p policy.Policy) error {
	return s.windowCheckChange(t, p)
}

func (windowKind) install(s *state, _ int64, p policy.Policy) error {
	s.windowInstall(p)
	return nil
}

func (windowKind) usage(s *state, name string) (keys, leases int) {
	for _, l := range s.win.keys[name] {
		keys++
		leases += l.LeaseCount()
	}
	return keys, leases
}

func (windowKind) listing(s *state, out *api.ListLeasesResponse, policyName, key string, now int64) {
	s.windowListing(out, policyName, key, now)
}

func (windowKind) frames(s *state) []kindFrame {
	var out []kindFrame
	for _, f := range s.exportWindows() {
		out = append(out, kindFrame{frameWindow, f})
	}
	return out
}

func (windowKind) restorers() map[byte]frameRestorer {
	return map[byte]frameRestorer{frameWindow: restoreFrame("window frame", (*state).importWindow)}
}

func (windowKind) prepareRestore(st *state, base RestoreBase, snapTime, _ int64) error {
	st.windowsPrepareRestore(base, snapTime)
	return nil
}

func (windowKind) leaseNanos(*state, []policy.Policy) int64 { return 0 }

func (windowKind) rebuildIndex(s *state) { s.rebuildWindowIndex() }

// slotKind: concurrency slots (lease.SlotLedger; slots.go).
type slotKind struct{}

func (slotKind) owns(p policy.Policy) bool { return p.Algorithm == policy.Concurrency }

func (slotKind) acquire(s *state, t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	return s.slotAcquire(t, c, k, seen)
}

func (slotKind) renew(s *state, t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	return s.slotRenew(t, c, k)
}

func (slotKind) release(s *state, t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	return s.slotRelease(t, c, k)
}

func (slotKind) revoke(s *state, t int64, clientID string, incarnation uint64) {
	s.slotRevoke(t, clientID, incarnation)
}

func (slotKind) expire(s *state, t, through, _ int64, res *Result) error {
	s.slotExpire(t, through, res)
	return nil
}

func (slotKind) nextDue(s *state) (int64, bool) { return s.slotsNextDue() }

func (slotKind) checkChange(s *state, t int64, p policy.Policy) error {
	return s.slotCheckChange(t, p)
}

func (slotKind) install(s *state, _ int64, p policy.Policy) error {
	s.slotInstall(p)
	return nil
}

// usage: PolicyUsage has never counted slot keys; counting them would
// change what it reports, which this table does not.
func (slotKind) usage(*state, string) (keys, leases int) { return 0, 0 }

func (slotKind) listing(s *state, out *api.ListLeasesResponse, policyName, key string, now int64) {
	s.slotListing(out, policyName, key, now)
}

func (slotKind) frames(s *state) []kindFrame {
	var out []kindFrame
	for _, f := range s.exportSlots() {
		out = append(out, kindFrame{frameSlots, f})
	}
	return out
}

func (slotKind) restorers() map[byte]frameRestorer {
	return map[byte]frameRestorer{frameSlots: restoreFrame("slot frame", (*state).importSlots)}
}

func (slotKind) prepareRestore(st *state, _ RestoreBase, _, until int64) error {
	return st.slotsPrepareRestore(until)
}

func (slotKind) leaseNanos(st *state, current []policy.Policy) int64 {
	return st.slotsLeaseNanos(current)
}

func (slotKind) rebuildIndex(s *state) { s.rebuildSlotIndex() }
