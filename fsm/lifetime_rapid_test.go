package fsm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/lease"
	"pgregory.net/rapid"
)

// The budget-lifetime property (docs/design.md §3.5): random histories of
// grants, renewals, releases and expiries interleaved with applying,
// re-applying, re-keying, deleting and re-creating the policy. Every
// client spends greedily: all of a grant's starting tokens at once, then
// everything its rate mints until the lease's expiry (the most it could
// admit). For every request attribute set, the admissions of the budgets
// that served it (whatever the keying was) must stay within
// max B + max r·W in every window.

type lifetimeParams struct {
	rate, burst, durS int
	keyed2, empty     bool // key [tenant, region]; start: empty
}

func (p lifetimeParams) yaml() string {
	key := "[tenant]"
	if p.keyed2 {
		key = "[tenant, region]"
	}
	start := ""
	if p.empty {
		start = "    start: empty\n"
	}
	return fmt.Sprintf(`
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: %d
    burst: %d
    key: %s
    lease: {duration: %ds}
%s`, p.rate, p.burst, key, p.durS, start)
}

func drawParams(t *rapid.T) lifetimeParams {
	return lifetimeParams{
		rate:   rapid.SampledFrom([]int{5, 10, 20}).Draw(t, "rate"),
		burst:  rapid.SampledFrom([]int{10, 20, 40}).Draw(t, "burst"),
		durS:   rapid.SampledFrom([]int{2, 5}).Draw(t, "dur"),
		keyed2: rapid.Bool().Draw(t, "keyed2"),
		empty:  rapid.IntRange(0, 3).Draw(t, "empty") == 0,
	}
}

// modelLease is what a greedy client does with one lease.
type modelLease struct {
	id             uint64
	rate           int64
	expires, spent int64 // cluster time; minted and spent up to spent
	origin         int64 // the rate applies from origin; counted spent since
	counted        int64
	keyed2         bool // the keying it was granted under
	tenant, region string
}

type lifetimeModel struct {
	h       *harness
	leases  map[string]*modelLease // by limiter (client + tenant)
	adm     []lifeAdmission
	maxB    int64
	maxR    int64
	seqs    map[string]uint64
	regions map[string]string
}

type lifeAdmission struct {
	at, milli      int64
	keyed2         bool
	tenant, region string
}

func (m *lifetimeModel) spend(l *modelLease, t int64) {
	// What it mints in each piece of lifeChunk is spent at the piece's end:
	// a lump at most rate·lifeChunk late, which the bound's slack covers.
	until := min(t, l.expires)
	for l.spent < until {
		end := min(until, l.spent+lifeChunk)
		if tot := lease.MulDiv(l.rate, end-l.origin, lease.NanosPerSecond); tot > l.counted {
			m.adm = append(m.adm, lifeAdmission{at: end, milli: tot - l.counted, keyed2: l.keyed2, tenant: l.tenant, region: l.region})
			l.counted = tot
		}
		l.spent = end
	}
}

// setRate switches a lease to a renewal's rate at t.
func (m *lifetimeModel) setRate(l *modelLease, t, rate int64) {
	m.spend(l, t)
	l.rate, l.origin, l.counted, l.spent = rate, t, 0, t
}

// lifeChunk is the model's spending granularity.
const lifeChunk = 50e6

func (m *lifetimeModel) grant(t int64, lim string, g *api.Grant, keyed2 bool, tenant, region string) {
	if old := m.leases[lim]; old != nil {
		m.spend(old, t) // replaced: the client switches to the new lease
	}
	l := &modelLease{id: g.GetLeaseId(), rate: g.GetRateMilliPerSec(), expires: t + g.GetTtlNanos(), spent: t, origin: t, keyed2: keyed2, tenant: tenant, region: region}
	if g.GetStartMilli() > 0 {
		m.adm = append(m.adm, lifeAdmission{at: t, milli: g.GetStartMilli(), keyed2: keyed2, tenant: tenant, region: region})
	}
	m.leases[lim] = l
}

// check verifies the bound for every attribute set: the admissions of the
// budget each keying mapped it to.
func (m *lifetimeModel) check() *quotacheck.Violation {
	// Slack: each budget's lumps (two budgets can serve one attribute set
	// across a keying change) are at most r·lifeChunk late.
	b := quotacheck.Bound{CapacityMilli: m.maxB, RateMilliPerSec: m.maxR, SlackMilli: 2 * lease.MulDiv(m.maxR, lifeChunk, lease.NanosPerSecond)}
	for _, tn := range []string{"x", "y"} {
		for _, rg := range []string{"eu", "us"} {
			var h []quotacheck.Admission
			for _, a := range m.adm {
				if a.tenant == tn && (!a.keyed2 || a.region == rg) {
					h = append(h, quotacheck.Admission{AtNanos: a.at, CostMilli: a.milli, Who: fmt.Sprintf("%s/%s keyed2=%v", a.tenant, a.region, a.keyed2)})
				}
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].AtNanos < h[j].AtNanos })
			if v := quotacheck.Check(h, b); v != nil {
				return v
			}
		}
	}
	return nil
}

func runLifetime(t *rapid.T, outer testing.TB, f fault) *lifetimeModel {
	h := &harness{t: outer, f: New(nil)}
	h.f.st.fault = f
	h.enableFeatures(BaselineFeatures)
	m := &lifetimeModel{h: h, leases: map[string]*modelLease{}, seqs: map[string]uint64{},
		regions: map[string]string{"a": "eu", "b": "us", "c": "eu"}}
	cur := drawParams(t)
	live := true
	apply := func(at int64, p lifetimeParams) *Result {
		r := h.applyYAMLResult(at, p.yaml())
		if r.Err == nil {
			cur, live = p, true
			m.maxB = max(m.maxB, int64(p.burst)*1000)
			m.maxR = max(m.maxR, int64(p.rate)*1000)
		}
		return r
	}
	if r := apply(0, cur); r.Err != nil {
		outer.Fatal(r.Err)
	}
	var at int64
	n := rapid.IntRange(1, 60).Draw(t, "n")
	for i := 0; i < n; i++ {
		// Mostly short steps: changes land while budgets are still low.
		at += rapid.SampledFrom([]int64{0, 1e6, 50e6, 200e6, 700e6, 1500e6}).Draw(t, "dt")
		cl := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "client")
		tn := rapid.SampledFrom([]string{"x", "x", "y"}).Draw(t, "tenant")
		op := rapid.IntRange(0, 14).Draw(t, "op")
		if held := sortedKeys(m.leases); (op == 3 || op == 4 || op == 5 || op == 12) && len(held) > 0 {
			// Renewals and releases are of a lease the client holds.
			cl, tn, _ = strings.Cut(rapid.SampledFrom(held).Draw(t, "lease"), "/")
		}
		lim, rg := cl+"/"+tn, m.regions[cl]
		key := &api.Key{Policy: "per-tenant", Attributes: map[string]string{"tenant": tn, "region": rg}}
		dem := &api.Demand{RateMilliPerSec: rapid.SampledFrom([]int64{0, 3_000, 30_000}).Draw(t, "dr"), BurstMilli: rapid.SampledFrom([]int64{0, 5_000, 50_000}).Draw(t, "db")}
		for _, l := range m.leases {
			m.spend(l, at)
		}
		m.seqs[cl]++
		c := caller(cl, 1, m.seqs[cl])
		switch op {
		case 0, 1, 2:
			ops := h.batch(at, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: c, Keys: []*api.AcquireKey{{Key: key, Demand: dem}}}}})
			if g := ops[0].Lease.GetLeases()[0].GetGrant(); g != nil {
				m.grant(at, lim, g, cur.keyed2, tn, rg)
			}
		case 3, 4:
			l := m.leases[lim]
			if l == nil {
				continue
			}
			ops := h.batch(at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{{Key: key, LeaseId: l.id, Demand: dem}}}}})
			if g := ops[0].Lease.GetLeases()[0].GetGrant(); g != nil {
				m.setRate(l, at, g.GetRateMilliPerSec())
				l.expires = max(l.expires, at+g.GetTtlNanos())
			} else {
				delete(m.leases, lim) // the client stops using it
			}
		case 5, 12:
			l := m.leases[lim]
			if l == nil {
				continue
			}
			h.batch(at, &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{{Key: key, LeaseId: l.id}}}}})
			delete(m.leases, lim)
		case 6:
			h.apply(CmdExpire, at, &api.ExpireCommand{ClientRetentionNanos: 3 * sec})
		case 7, 13: // delete
			if r := h.apply(CmdDeletePolicy, at, &api.DeletePolicyCommand{Name: "per-tenant"}); r.Err == nil {
				live = false
			}
		case 8, 14: // re-apply identical (re-create it after a delete)
			apply(at, cur)
		case 9: // re-create or change the parameters, same keying
			p := drawParams(t)
			p.keyed2, p.empty = cur.keyed2, cur.empty
			apply(at, p)
		default: // re-key (or toggle the start)
			apply(at, drawParams(t))
		}
		if !live && len(h.f.st.policies) != 0 {
			outer.Fatal("model out of step: policy live after delete")
		}
	}
	for _, l := range m.leases {
		m.spend(l, at+3600*sec)
	}
	// Whatever happened, the state snapshots and restores identically, and
	// every retired budget is collected once nothing happens for a while.
	snap := snapshotBytes(outer, h.f)
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(snap, snapshotBytes(outer, g)) {
		t.Fatal("restore not identical")
	}
	if f == faultNone {
		for k := 0; k < 100; k++ {
			due, ok := h.f.NextDue()
			if !ok {
				break
			}
			h.apply(CmdExpire, max(due, at), &api.ExpireCommand{})
			at = max(due, at)
		}
		if len(h.f.st.retired) != 0 {
			t.Fatalf("retired budgets left after they refilled: %d names", len(h.f.st.retired))
		}
	}
	return m
}

func TestBudgetLifetimeKeepsBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := runLifetime(rt, t, faultNone)
		if v := m.check(); v != nil {
			rt.Fatalf("%v", v)
		}
	})
}
