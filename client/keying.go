package client

import (
	"slices"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/faults"
)

// One holder per budget (docs/design.md §3.4, rule 7).
//
// The cluster keys a policy's budgets by the policy's key attributes only,
// and its leases by (budget, client ID, incarnation): two limiters of one
// Client whose keys differ only in attributes the policy ignores are one
// lease holder of one budget there. If both held a lease, each acquire
// would replace the other's while the other kept admitting. So the Client
// maps every key to the policy's canonical key and keeps one limiter (one
// lease, one bucket) per canonical key:
//
//   - It learns a policy's key attributes from its grants
//     (Grant.key_attributes). Until it knows them, it acquires at most one
//     key of the policy at a time (acquireable), so no two limiters of one
//     budget ever both ask.
//   - Once it knows them, Client.Limiter returns, for a key whose
//     canonical key already has a limiter, that limiter if the key is the
//     one it was made for, or else a new alias: a *Limiter of its own that
//     hands every call to the limiter of its budget (the Client does not
//     keep aliases, so keys with ever new extra attributes cost nothing
//     once their callers drop them). A limiter made before
//     the attributes were known, which turns out to share a budget with
//     another, becomes such an alias too (its lease, if it had one, is
//     released).
//   - A policy update that changes the key attributes is learned from the
//     next grant or renewal: the policy's limiters are regrouped under the
//     new canonical keys, and every alias looks its budget up again (by
//     its own key) at its next call.
//
// A server too old to send the attributes (key_attributes_set false)
// leaves the Client as it was before: one limiter per full key.

// keying is what the Client knows of a policy's key attributes.
type keying struct {
	attrs  []string // sorted
	legacy bool     // the cluster does not say (an older server)
}

// projectLocked returns key reduced to the attributes that count for
// policy, and whether the policy's keying is known. c.mu must be held.
func (c *Client) projectLocked(policy string, key map[string]string) (Key, bool) {
	k, ok := c.keyings[policy]
	if !ok || k.legacy {
		return key, false
	}
	out := make(Key, len(k.attrs))
	for _, a := range k.attrs {
		if v, ok := key[a]; ok {
			out[a] = v
		}
	}
	return out, true
}

// canonicalIDLocked is the ID a limiter for key is registered under: the
// LimiterID of its canonical key once the policy's keying is known, of the
// full key before. c.mu must be held.
func (c *Client) canonicalIDLocked(policy string, key map[string]string) string {
	p, _ := c.projectLocked(policy, key)
	return LimiterID(policy, p)
}

// keyingUnknownLocked reports whether the Client has yet to learn which of
// policy's attributes count. c.mu must be held.
func (c *Client) keyingUnknownLocked(policy string) bool {
	_, ok := c.keyings[policy]
	return !ok
}

// acquireable splits the limiters due for a first lease into those to
// acquire now and those to hold back a pass: of a policy whose keying is
// unknown, only one is sent at a time, so two limiters that turn out to
// share a budget never both hold a lease.
func (c *Client) acquireable(ls []*Limiter) (now, later []*Limiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	probing := map[string]bool{}
	for _, l := range ls {
		if l.evicted.Load() {
			continue // aliased (or evicted) meanwhile
		}
		if c.keyingUnknownLocked(l.policy) {
			if probing[l.policy] {
				later = append(later, l)
				continue
			}
			probing[l.policy] = true
		}
		now = append(now, l)
	}
	return now, later
}

func sameAttrs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// learnKeying records the key attributes a grant for l names. If they are
// new for l's policy, it regroups the policy's limiters under the
// canonical keys: one limiter per budget stays (l for its own), the
// others become aliases of it, and the leases they held are released.
// The background loop calls it for every grant and renewal it installs.
func (c *Client) learnKeying(l *Limiter, g *api.Grant) {
	// faults.IgnoreKeyAttributes (test builds only): as before the rule.
	k := keying{legacy: !g.GetKeyAttributesSet() || faults.Active(faults.IgnoreKeyAttributes)}
	if !k.legacy {
		k.attrs = slices.Sorted(slices.Values(g.GetKeyAttributes()))
		k.attrs = slices.Compact(k.attrs)
	}
	c.mu.Lock()
	if old, ok := c.keyings[l.policy]; ok && old.legacy == k.legacy && slices.Equal(old.attrs, k.attrs) {
		c.mu.Unlock()
		return
	}
	if c.keyings == nil {
		c.keyings = map[string]keying{}
	}
	c.keyings[l.policy] = k
	c.keyingGen.Add(1)
	// Regroup: the limiter that learned keeps its budget; of the others,
	// one with a usable lease is preferred, then any (in ID order, so the
	// choice does not depend on map order).
	var mine []*Limiter
	for _, x := range c.limiters {
		if x.policy == l.policy {
			mine = append(mine, x)
		}
	}
	slices.SortFunc(mine, func(a, b *Limiter) int {
		rank := func(x *Limiter) int {
			switch t := x.cur.Load(); {
			case x == l:
				return 0
			case t != nil && !t.expiredAck:
				return 1
			}
			return 2
		}
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	for _, x := range mine {
		delete(c.limiters, x.regID)
	}
	var merged []*Limiter
	gen := c.keyingGen.Load()
	for _, x := range mine {
		id := c.canonicalIDLocked(x.policy, x.attrs)
		if s, ok := c.limiters[id]; ok {
			// Same budget as s: x becomes its alias. Before cur is
			// unpublished (as for an eviction), so a caller that misses
			// the fast path sees evicted and goes to s.
			x.successor.Store(s)
			x.successorGen.Store(gen)
			x.evicted.Store(true)
			c.foldCountsLocked(x, false)
			merged = append(merged, x)
			continue
		}
		x.regID = id
		c.limiters[id] = x
	}
	c.mu.Unlock()
	if len(merged) == 0 {
		return
	}
	held := make([]*terms, len(merged))
	for i, x := range merged {
		held[i] = x.cur.Swap(nil)
		x.firstOnce.Do(func() { close(x.first) }) // first-lease waits go to the budget's limiter
	}
	if err := c.release(c.stop, c.clock.Precise()+int64(c.cfg.RequestTimeout), merged, held); err != nil {
		c.log.Warn("release of merged limiters failed", "keys", len(merged), "err", err)
	}
	c.log.Debug("limiters merged into their budgets' limiters", "policy", l.policy, "keys", len(merged))
}
