package coordinator

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
)

// The switch budget (docs/design.md §3.4, "The switch budget"). A client
// deciding a key remotely asks the key's home server before it takes the
// key back to a lease of its own (CheckItem.promote); the server grants
// from a token bucket per policy, RemotePromotionRate per second with a
// burst of one second's worth. A grant is one new lease acquire at most,
// so the promotions of a policy across the cluster are at most
// servers × (rate + rate·t) in any t seconds, however many clients ask:
// an edge or server failure that sends every replica's keys back at once
// is paced here, not per client.

// DefaultRemotePromotionRate is Config.RemotePromotionRate's default:
// promotions granted per second per policy by one server.
const DefaultRemotePromotionRate = 256

// MaxRemotePromotionRate is the highest Config.RemotePromotionRate.
const MaxRemotePromotionRate = 1_000_000

// maxPromotionPolicies bounds the budgets a server keeps (one per policy
// that was asked; only stored policies get one).
const maxPromotionPolicies = 1 << 12

// promotionBudget is one server's promotion buckets and their counts.
type promotionBudget struct {
	ratePerSec int64
	mu         sync.Mutex
	byPolicy   map[string]*policyPromotions
}

type policyPromotions struct {
	bucket          *lease.TokenBucket
	granted, denied atomic.Uint64
}

func newPromotionBudget(ratePerSec int64) *promotionBudget {
	if ratePerSec <= 0 {
		ratePerSec = DefaultRemotePromotionRate
	}
	return &promotionBudget{ratePerSec: ratePerSec, byPolicy: map[string]*policyPromotions{}}
}

// decide answers one promotion request for policy at now: granted while
// the policy's bucket has a token.
func (b *promotionBudget) decide(policy string, now time.Time) api.Promotion {
	b.mu.Lock()
	defer b.mu.Unlock()
	nanos := now.UnixNano()
	p := b.byPolicy[policy]
	if p == nil {
		if len(b.byPolicy) >= maxPromotionPolicies {
			return api.Promotion_PROMOTION_DENIED_TRY_LATER
		}
		milli := b.ratePerSec * lease.MilliPerToken
		bk, err := lease.NewTokenBucket(lease.BucketConfig{CapacityMilli: milli, RateMilliPerSec: milli, StartFull: true}, nanos)
		if err != nil {
			return api.Promotion_PROMOTION_DENIED_TRY_LATER // a rate Validate let through: refuse, never grant
		}
		p = &policyPromotions{bucket: bk}
		b.byPolicy[policy] = p
	}
	d, err := p.bucket.Admit(nanos, lease.MilliPerToken)
	if faults.Active(faults.PromoteBudgetIgnored) {
		// The negative control: every promotion is granted.
		d.Allowed, err = true, nil
	}
	if err != nil || !d.Allowed {
		p.denied.Add(1)
		return api.Promotion_PROMOTION_DENIED_TRY_LATER
	}
	p.granted.Add(1)
	return api.Promotion_PROMOTION_GRANTED
}

// PromotionCount is one policy's promotion answers at one server.
type PromotionCount struct {
	Policy          string
	Granted, Denied uint64
}

// counts returns the answers so far, by policy name.
func (b *promotionBudget) counts() []PromotionCount {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]PromotionCount, 0, len(b.byPolicy))
	for name, p := range b.byPolicy {
		out = append(out, PromotionCount{Policy: name, Granted: p.granted.Load(), Denied: p.denied.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	return out
}
