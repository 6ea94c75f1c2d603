package fsm

import (
	"fmt"
	"math"
	"time"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Budget lifetime (docs/design.md §3.5). A policy's budgets outlive its
// definition: deleting a policy retires its keys' ledgers instead of
// dropping them, and re-creating the policy with the same keying
// resurrects them (leases and pool levels included), so delete-and-apply
// refills nothing. A keying change (key attributes, algorithm or start)
// cannot map old keys to new ones: it is refused while old leases are
// live, and after that the old ledgers are folded into the name's floor,
// a bound on the tokens any new key of the name starts with, until every
// old budget would have refilled. A retired ledger is collected once it is
// indistinguishable from a fresh one (no leases, pool full).

// retiredPolicy is what the state remembers of a name's earlier budgets.
type retiredPolicy struct {
	// spec is the deleted definition and keys its keys' ledgers (spec nil:
	// none, only a floor). A name has a spec here only while it is not live.
	spec *policy.Policy
	keys *ledgerMap
	at   int64 // cluster time of the delete
	fl   floor
}

// floor bounds the pool a new key starts with: at cluster time t at most
// capMilli - ceil(rate·(fullAt - t)), until fullAt (0: no floor). Folded
// from leaseless ledgers whose pools are below full: each ledger i would
// hold at least B_i - ceil(r_i·(F_i - t)) at t, where F_i is when its pool
// fills, and the floor takes the smallest B, the largest r and the latest
// F, so it is below every one of them.
type floor struct {
	capMilli, rateMilliPerSec, fullAt int64
}

func (f floor) active(t int64) bool { return f.fullAt > t }

// levelAt is the most tokens a new key may start with at t under the floor
// (math.MaxInt64 once it has lapsed).
func (f floor) levelAt(t int64) int64 {
	if !f.active(t) {
		return math.MaxInt64
	}
	// +1 rounds the product up (a ceiling, or one more).
	missing := lease.MulDiv(f.rateMilliPerSec, f.fullAt-t, lease.NanosPerSecond)
	if missing < math.MaxInt64 {
		missing++
	}
	return max(0, f.capMilli-missing)
}

// fold lowers the floor to cover l, a leaseless ledger, from t on.
func (f *floor) fold(t int64, l *lease.Ledger) {
	full := l.PoolFullAt()
	if full <= t {
		return // full: indistinguishable from a fresh budget
	}
	cfg := l.Config()
	if f.fullAt <= t {
		*f = floor{capMilli: cfg.CapacityMilli, rateMilliPerSec: cfg.RateMilliPerSec, fullAt: full}
		return
	}
	f.capMilli = min(f.capMilli, cfg.CapacityMilli)
	f.rateMilliPerSec = max(f.rateMilliPerSec, cfg.RateMilliPerSec)
	f.fullAt = max(f.fullAt, full)
}

// fresh reports whether l is indistinguishable from a fresh budget at t (no
// leases, pool full), so forgetting it lets nothing more through.
func fresh(t int64, l *lease.Ledger) bool {
	return l.LeaseCount() == 0 && l.PoolFullAt() <= t
}

func (s *state) retiredOf(name string) *retiredPolicy {
	r := s.retired[name]
	if r == nil {
		r = &retiredPolicy{}
		s.retired[name] = r
	}
	return r
}

// tidy forgets what no longer bounds anything.
func (s *state) tidy(t int64, name string) {
	defer s.trackRetired(name)
	r := s.retired[name]
	if r == nil {
		return
	}
	if r.keys.Len() == 0 {
		r.spec, r.keys, r.at = nil, nil, 0
	}
	if !r.fl.active(t) {
		r.fl = floor{}
	}
	if r.spec == nil && r.fl == (floor{}) {
		delete(s.retired, name)
	}
}

// checkChange refuses a policy whose budgets cannot carry over while
// leases granted under the old keying are live: fresh budgets next to live
// old leases would let both be spent.
func (s *state) checkChange(p policy.Policy) error {
	var keys *ledgerMap
	if old, live := s.policies[p.Name]; live {
		if sameKeying(old, p) {
			return nil
		}
		keys = s.keys[p.Name]
	} else if r := s.retired[p.Name]; r != nil && r.spec != nil {
		if sameKeying(*r.spec, p) && !s.forgetRetired() {
			return nil // resurrected with its leases
		}
		keys = r.keys
	}
	if n, until := liveLeases(keys); n > 0 {
		return fmt.Errorf("%w: policy %q: %d leases granted under its previous keying are live until cluster time %s; "+
			"a policy whose key, algorithm or start changes can be applied once they have expired",
			rpcerr.ErrPrecondition, p.Name, n, time.Duration(until))
	}
	return nil
}

// install stores p (checkChange passed): reconfigures or resurrects the
// budgets it keeps, and folds those it cannot keep into the floor.
func (s *state) install(t int64, p policy.Policy) error {
	old, live := s.policies[p.Name]
	s.policies[p.Name] = p
	var keep *ledgerMap
	switch r := s.retired[p.Name]; {
	case live && sameKeying(old, p):
		keep = s.keys[p.Name]
	case live:
		// Re-keyed; no leases (checkChange). A live name has no retired spec.
		s.foldAll(t, p.Name, s.keys[p.Name])
		s.untrackAll(s.keys[p.Name])
		delete(s.keys, p.Name)
	case r != nil && r.spec != nil:
		if sameKeying(*r.spec, p) && !s.forgetRetired() {
			keep = r.keys
			s.keys[p.Name] = keep
		} else {
			s.foldAll(t, p.Name, r.keys)
			s.untrackAll(r.keys)
		}
		r.keys = nil
	}
	s.tidy(t, p.Name)
	for _, kl := range keep.all() {
		s.retrack(kl, dueLive) // resurrected ones were retired
	}
	for _, ck := range keep.sortedKeys() {
		kl := keep.at(ck)
		err := s.mut(kl).Reconfigure(t, s.ledgerConfigFor(p))
		s.touch(kl)
		if err != nil {
			return fmt.Errorf("reconfigure %s/%s: %w", p.Name, ck, err)
		}
	}
	return nil
}

func (s *state) foldAll(t int64, name string, keys *ledgerMap) {
	if s.forgetRetired() {
		return // the old rule: the old budgets are forgotten
	}
	r := s.retiredOf(name)
	for _, ck := range keys.sortedKeys() {
		r.fl.fold(t, keys.at(ck).ledger)
	}
	s.tidy(t, name)
}

// startPool is the pool a new key of p starts with at t: what p says
// (B or 0), but no more than the name's floor.
func (s *state) startPool(t int64, p policy.Policy) (pool int64, floored bool) {
	pool = 0
	if p.StartFull {
		pool = p.BurstMilli
	}
	if r := s.retired[p.Name]; r != nil && r.fl.active(t) && !s.forgetRetired() {
		if lv := r.fl.levelAt(t); lv < pool {
			pool = lv
			floored = true
		}
	}
	if lv, ok := s.restoreLevel(t, p); ok && lv < pool {
		return lv, true
	}
	return pool, floored
}

// retire moves a deleted policy's ledgers into the retired set, dropping at
// once those indistinguishable from fresh budgets.
func (s *state) retire(t int64, p policy.Policy) {
	keys := s.keys[p.Name]
	delete(s.keys, p.Name)
	kept := s.newLedgerMap()
	for _, ck := range keys.sortedKeys() {
		kl := keys.at(ck)
		if l := kl.ledger; l.LeaseCount() == 0 && (s.forgetRetired() || fresh(t, l)) {
			s.untrack(kl)
			continue
		}
		kept.set(ck, kl)
	}
	if kept.Len() == 0 {
		return
	}
	r := s.retiredOf(p.Name)
	r.spec, r.keys, r.at = &p, kept, t
	for _, ck := range kept.sortedKeys() {
		s.retrack(kept.at(ck), dueRetired)
	}
	s.trackRetired(p.Name)
}

// liveLeases counts the leases of a set of ledgers and the latest time
// any of them holds terms (replaced leases' terms included).
func liveLeases(keys *ledgerMap) (n int, until int64) {
	for _, kl := range keys.all() {
		for _, le := range kl.ledger.Leases() {
			n++
			until = max(until, le.HoldUntil())
		}
	}
	return n, until
}

// forgetRetired reports whether budgets die with their definitions, as
// before they were retired: only in the negative control that restores
// that rule.
func (s *state) forgetRetired() bool {
	return s.has(faultForgetRetired)
}
