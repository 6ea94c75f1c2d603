package fsm

import (
	"container/heap"
	"fmt"
	"strings"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// Key quotas (docs/policy.md#max_keys_per_value, docs/security.md#tenant-isolation):
// one value of a token-bucket policy's first key attribute (one tenant, for
// a policy keyed [tenant, ...]) may hold at most policy.KeysPerValue() of
// the policy's live keys, so no value can fill max_keys and shut the
// others out. The rule is checked where a key is created (resolve), from
// the count of live keys sharing the value that every key map keeps
// (cowMap.groups), which is derived from the keys alone and so is the
// same on every replica. The policy's max_keys still bounds the total.
// Before a new key is refused for either bound, the keys an expire would
// collect at that time (no leases, bucket full again) are collected, so
// only keys someone holds, or that still owe tokens, count.

// keyGroup is the part of canonical key ck that names the value of its
// policy's first key attribute, and whether it has one that other keys
// may share: the text before the first '/', which cannot occur inside an
// escaped value (policy.CanonicalKey). A key without '/' (a policy with
// fewer than two key attributes) is alone in its group.
func keyGroup(ck string) (string, bool) {
	i := strings.IndexByte(ck, '/')
	if i < 0 {
		return "", false
	}
	return ck[:i], true
}

// roomFor refuses a new key ck of p when the policy tracks max_keys keys
// or its first attribute's value already has KeysPerValue() of them, only
// after collecting what is collectable at t (collectFresh).
func (s *state) roomFor(t int64, p policy.Policy, ck string) error {
	err := s.checkRoom(p, ck)
	if err != nil {
		s.collectFresh(t)
		err = s.checkRoom(p, ck)
	}
	return err
}

func (s *state) checkRoom(p policy.Policy, ck string) error {
	if int64(s.keys[p.Name].Len()) >= p.MaxKeys {
		return fmt.Errorf("%w: policy %q already tracks max_keys=%d keys", rpcerr.ErrResourceExhausted, p.Name, p.MaxKeys)
	}
	if s.has(faultKeyQuotaIgnored) {
		return nil
	}
	g, ok := keyGroup(ck)
	if !ok {
		return nil
	}
	if n, limit := int64(s.keys[p.Name].group(g)), p.KeysPerValue(); n >= limit {
		return fmt.Errorf("%w: policy %q already tracks %d keys whose %s is %q, its max_keys_per_value=%d; keys with other values are unaffected",
			rpcerr.ErrResourceExhausted, p.Name, n, p.Key[0], g, limit)
	}
	return nil
}

// collectScan bounds the due entries collectFresh looks at: what it
// leaves, the next expire entry collects.
const collectScan = 1024

// collectFresh collects the live keys an expire at t would collect (no
// leases, pool full by t: indistinguishable from a fresh key, so dropping
// one admits nothing more), looking at no more than collectScan entries
// of the due index in its order (the same sequence on every replica).
// Leases are not expired here: the leader's expire entries do that,
// within the margin a new term needs.
func (s *state) collectFresh(t int64) {
	var back []*dueItem
	res := &Result{}
	for n := 0; n < collectScan && len(s.idx.due) > 0 && (s.idx.due[0].due <= t || s.has(faultCollectOwing)); n++ {
		it := heap.Pop(&s.idx.due).(*dueItem)
		if it.kind != dueLive || it.kl.ledger.LeaseCount() > 0 {
			back = append(back, it)
			continue
		}
		if s.has(faultCollectOwing) {
			s.dropLive(it.kl)
			continue
		}
		// Re-indexes what it keeps; an error is time going backwards,
		// which Apply's clamp rules out.
		_ = s.expireKey(t, t, it.kl, res)
	}
	for _, it := range back {
		heap.Push(&s.idx.due, it)
	}
}

// dropLive forgets a live key (the negative control's broken collection).
func (s *state) dropLive(kl *keyLedger) {
	s.untrack(kl)
	keys := s.keys[kl.item.name]
	keys.del(kl.item.key)
	if keys.Len() == 0 {
		delete(s.keys, kl.item.name)
	}
}
