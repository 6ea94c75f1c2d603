package fsm

import (
	"bytes"
	"fmt"
	"io"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// Snapshot restores by an operator (rationctl snapshot restore), rule (j)
// of the ledger (docs/design.md §3.5).
//
// A restore replaces the whole state by an older one. The state it
// replaces granted leases the snapshot does not know, and their holders
// keep using them until their deadlines; and the snapshot's budgets may be
// fuller than the current ones. Restored as it was, the cluster would grant
// those shares again at once and hand out the saved bursts a second time
// (TestRestoreMidTrafficKeepsTheBound: 51 tokens in 35 ms against a burst
// of 50 at r = 1/s). So the leader prepares the snapshot before Raft
// installs it (PrepareRestore):
//
//   - cluster time continues from the current one, never the snapshot's;
//   - every budget, restored or created later, counts as wholly held until
//     now + the longest lease duration (+1 s): every lease the replaced
//     state granted was committed by now and is reclaimed by then, and its
//     holder stops before that; grants and renewals get nothing meanwhile,
//     and every pool is emptied and mints nothing;
//   - after the hold, a budget created from scratch starts no fuller than
//     one that was empty at the hold's end would be;
//   - lease IDs start a new generation (generation << 32), so a delayed
//     release or renewal of a lease granted before the restore cannot end
//     a new lease that reuses its ID.
//
//   - window time never goes back: the restored window clock is the
//     replaced state's, stepped forward to the snapshot's own window time
//     if that is later (window.go, windowsPrepareRestore);
//
// The cost is an outage of one lease duration for every key, which a
// disaster-recovery restore can afford; the bound holds across it.

// RestoreHoldMarginNanos is added to the longest lease duration.
const RestoreHoldMarginNanos = int64(1e9)

// RestoreBase is what a restore keeps of the state it replaces
// (FSM.RestoreBase): its applied cluster time, its policies and its window
// clock.
type RestoreBase struct {
	// ClusterTime is the replaced state's applied cluster time.
	ClusterTime int64
	// Policies are the replaced state's policies.
	Policies []policy.Policy
	// win is the replaced state's window clock, if set.
	winSet   bool
	winClock lease.WindowClock
	// fault is the replaced state's broken rule (tests only).
	fault fault
}

// RestoreBase reads, under one lock, what PrepareRestore keeps of this
// state. The leader calls it with no window re-sync in flight (the
// coordinator serialises the two), so the window time it reads is the
// latest the cluster applied.
func (f *FSM) RestoreBase() RestoreBase {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b := RestoreBase{ClusterTime: f.st.clusterTime, winSet: f.st.win.epochSet, winClock: f.st.windowClockAt(), fault: f.st.fault}
	for _, n := range sortedKeys(f.st.policies) {
		b.Policies = append(b.Policies, f.st.policies[n])
	}
	return b
}

// PrepareRestore rewrites snapshot (the bytes an operator restores) for a
// cluster whose state is base (the current one): see above. It refuses a
// snapshot this server cannot read.
func PrepareRestore(snapshot []byte, base RestoreBase) ([]byte, error) {
	st, err := importState(bytes.NewReader(snapshot))
	if err != nil {
		return nil, err
	}
	now, current := base.ClusterTime, base.Policies
	longest := int64(0)
	for _, kd := range kinds {
		longest = max(longest, kd.leaseNanos(st, current))
	}
	if longest == 0 {
		longest = lease.MaxTTLNanos
	}
	snapTime := st.clusterTime
	st.clusterTime = max(st.clusterTime, now)
	until := st.clusterTime + longest + RestoreHoldMarginNanos
	st.restoreHoldUntil = max(st.restoreHoldUntil, until)
	st.idGeneration++
	for _, kd := range kinds {
		if err := kd.prepareRestore(st, base, snapTime, until); err != nil {
			return nil, err
		}
	}
	var out bytes.Buffer
	if err := writeCapture(&out, st.capture(nil)); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// tokensPrepareRestore applies rule (j) to every token bucket of a
// restored state, live and retired: held until until, lease IDs in the
// new generation.
func (st *state) tokensPrepareRestore(until int64) error {
	hold := func(l *lease.Ledger) error {
		if err := l.HoldAll(max(st.clusterTime, l.NowNanos()), until); err != nil {
			return err
		}
		l.RaiseNextID(st.firstLeaseID())
		return nil
	}
	for _, pn := range sortedKeys(st.keys) {
		for _, ck := range st.keys[pn].sortedKeys() {
			if err := hold(st.mut(st.keys[pn].at(ck))); err != nil {
				return fmt.Errorf("fsm: prepare restore: %s/%s: %w", pn, ck, err)
			}
		}
	}
	for _, name := range sortedKeys(st.retired) {
		for _, ck := range st.retired[name].keys.sortedKeys() {
			if err := hold(st.mut(st.retired[name].keys.at(ck))); err != nil {
				return fmt.Errorf("fsm: prepare restore: retired %s/%s: %w", name, ck, err)
			}
		}
	}
	return nil
}

// PrepareRecovery rewrites snapshot, the state a server recovered from its
// own disk after the cluster lost its quorum for good (rationd recover:
// raft.RecoverCluster replays the server's log and persists its state as a
// snapshot), as PrepareRestore does an operator's snapshot, with the
// recovered state as its own base: rule (j) of docs/design.md §3.5
// applies to a recovery as to a restore. The recovered disk may be stale:
// the lost servers may have committed grants this one never applied, and
// their holders admit until the grants' deadlines. So every budget is
// held for the longest lease duration plus the margin from the recovered
// cluster time, which the recovered cluster's first leader continues from
// (cluster time never jumps: coordinator/leader.go), so the hold lasts at
// least that long in real time after the recovery, longer than any lost
// grant can live after the quorum was lost; and lease IDs start a new
// generation, so a renewal or release of a lost lease cannot touch a new
// one.
func PrepareRecovery(snapshot []byte) ([]byte, error) {
	return prepareRecovery(snapshot, stateFault())
}

func prepareRecovery(snapshot []byte, broken fault) ([]byte, error) {
	f := New(nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snapshot))); err != nil {
		return nil, err
	}
	base := f.RestoreBase()
	base.fault = broken
	if base.has(faultRecoveryNoHold) {
		return snapshot, nil
	}
	return PrepareRestore(snapshot, base)
}

// firstLeaseID is where a ledger's lease IDs start in this generation.
func (s *state) firstLeaseID() lease.LeaseID {
	return lease.LeaseID(s.idGeneration<<32 + 1)
}

// restoreLevel bounds the pool of a key created at t after a restore: none
// until the hold ends, then what minting from empty at its end gives.
func (s *state) restoreLevel(t int64, p policy.Policy) (int64, bool) {
	if s.restoreHoldUntil == 0 {
		return 0, false
	}
	if t < s.restoreHoldUntil {
		return 0, true
	}
	per := lease.ClientPeriodNanos(ledgerConfig(p).RatePeriod(), p.DriftPPM)
	return min(p.BurstMilli, lease.MulDiv(p.RateMilliPerSec, t-s.restoreHoldUntil, per)), true
}

// afterRestore applies the restore's hold and ID generation to a ledger
// created at t.
func (s *state) afterRestore(t int64, l *lease.Ledger) error {
	if s.idGeneration > 0 {
		l.RaiseNextID(s.firstLeaseID())
	}
	if t < s.restoreHoldUntil {
		return l.HoldAll(t, s.restoreHoldUntil)
	}
	return nil
}
