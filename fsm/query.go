package fsm

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// Reads for the admin API and the leader loop. They take the read lock and
// return copies; on a follower they show its applied (possibly stale) state.

// ClusterTime returns the cluster time of the latest applied entry.
func (f *FSM) ClusterTime() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.clusterTime
}

// Counts returns how many policies, keys and leases the state holds, and
// how many clients have idempotency records. Keys and leases include those
// of deleted policies' retired budgets.
func (f *FSM) Counts() (policies, keys, leases, clients int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	count := func(ks *ledgerMap) {
		keys += ks.Len()
		for _, kl := range ks.all() {
			leases += kl.ledger.LeaseCount()
		}
	}
	for _, ks := range f.st.keys {
		count(ks)
	}
	for _, r := range f.st.retired {
		count(r.keys)
	}
	return len(f.st.policies), keys, leases, len(f.st.clients)
}

// Policies returns the stored policies sorted by name.
func (f *FSM) Policies() []policy.Policy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]policy.Policy, 0, len(f.st.policies))
	for _, n := range sortedKeys(f.st.policies) {
		out = append(out, f.st.policies[n])
	}
	return out
}

// Policy returns one stored policy.
func (f *FSM) Policy(name string) (policy.Policy, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.st.policies[name]
	return p, ok
}

// PolicyUsage returns how many keys and leases a policy has.
func (f *FSM) PolicyUsage(name string) (keys, leases int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, kd := range kinds {
		k, l := kd.usage(f.st, name)
		keys, leases = keys+k, leases+l
	}
	return keys, leases
}

// NextDue returns the earliest cluster time at which an expire command would
// change something: a lease expiry, an idle key's pool becoming full (and
// so collectable, retired keys included), or a floor lapsing. ok is false
// when nothing is pending.
func (f *FSM) NextDue() (due int64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.nextDue() // the due indexes' tops: no scan

}

// Leases lists leases and keys, optionally filtered by policy and canonical
// key, sorted by policy, key and holder. A deleted policy's retired keys
// are listed under its name (it is not in Policies) until they are
// collected; the floor a keying change left is not listed. Times to expiry
// count from nowNanos (the leader's clock), or from the last applied entry
// if that is later.
func (f *FSM) Leases(policyName, key string, nowNanos int64) *api.ListLeasesResponse {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := max(f.st.clusterTime, nowNanos)
	out := &api.ListLeasesResponse{ClusterTimeNanos: now}
	for _, kd := range kinds {
		kd.listing(f.st, out, policyName, key, now)
	}
	return out
}

// tokenListing lists the token-bucket keys and leases (kinds.go).
func (s *state) tokenListing(out *api.ListLeasesResponse, policyName, key string, now int64) {
	// A name is either live (keys) or deleted (a retired spec), never both.
	byName := map[string]*ledgerMap{}
	for pn, ks := range s.keys {
		byName[pn] = ks
	}
	for pn, r := range s.retired {
		if r.spec != nil {
			byName[pn] = r.keys
		}
	}
	for _, pn := range sortedKeys(byName) {
		if policyName != "" && pn != policyName {
			continue
		}
		for _, ck := range byName[pn].sortedKeys() {
			if key != "" && ck != key {
				continue
			}
			l := byName[pn].at(ck).ledger
			cfg := l.Config()
			out.Keys = append(out.Keys, &api.KeyInfo{
				Policy: pn, Key: ck, PoolMilli: l.PoolMilli(), DebtMilli: l.DebtMilli(),
				RateMilliPerSec: perSecond(cfg, cfg.RateMilliPerSec), CapacityMilli: cfg.CapacityMilli,
			})
			for _, le := range l.Leases() {
				hr, hc := le.HeldAt(l.NowNanos())
				out.Leases = append(out.Leases, &api.LeaseInfo{
					Policy: pn, Key: ck, ClientId: le.ClientID, Incarnation: le.Incarnation,
					LeaseId: uint64(le.ID), RateMilliPerSec: perSecond(cfg, le.Current.RateMilliPerSec),
					CapMilli: le.Current.CapMilli, StartMilli: le.StartMilli,
					ExpiresNanos: le.Current.ExpiresNanos, ExpiresInNanos: le.Current.ExpiresNanos - now,
					HeldRateMilliPerSec: perSecond(cfg, hr), HeldCapMilli: hc,
				})
			}
		}
	}
}

// StateHash returns the Raft index of the last command applied and the
// SHA-256 of the whole replicated state at that point (the bytes of a
// snapshot, which are deterministic). Servers that applied the same log
// prefix report equal hashes; the jepsen-like tests' convergence check
// compares them. The index is 0 after a snapshot restore until the next
// command is applied.
func (f *FSM) StateHash() (index uint64, sha string) {
	// A capture (cow.go): the hashing runs outside the lock.
	f.mu.Lock()
	cp := f.st.capture(f)
	index = f.index
	f.mu.Unlock()
	defer cp.done()
	h := sha256.New()
	if err := writeCapture(h, cp); err != nil {
		// A hash never fails to write; keep the signature honest anyway.
		return index, "error: " + err.Error()
	}
	return index, hex.EncodeToString(h.Sum(nil))
}

// BaselineOn reports whether the switches of the v0.1.0 baseline are on
// (after a cluster's first entry). It takes no lock.
func (f *FSM) BaselineOn() bool { return f.baseline.Load() }

// Features returns the feature switches turned on (FeatureXxx bits).
func (f *FSM) Features() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.features
}

// perSecond states a ledger's rate (per its rate period) per second,
// rounded down, for listings.
func perSecond(cfg lease.LedgerConfig, rate int64) int64 {
	if cfg.RatePeriodNanos == 0 {
		return rate
	}
	return lease.MulDiv(rate, lease.NanosPerSecond, cfg.RatePeriodNanos)
}
