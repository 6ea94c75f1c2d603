package fsm

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// The reference implementations: expire and revoke by scanning every
// ledger, floor and client record, applying the same rule (isDue,
// expireKey) as the indexed ones. Only the selection differs, so a state
// driven by them and one driven by the indexes must stay byte-identical.
var referenceScan = &referenceImpl{expire: expireScan, revoke: revokeScan}

func expireScan(s *state, t, through, retention int64) (*Result, error) {
	res := &Result{}
	for _, pn := range sortedKeys(s.keys) {
		keys := s.keys[pn]
		for _, ck := range keys.sortedKeys() {
			if kl := keys.at(ck); s.isDue(t, through, kl) {
				if err := s.expireKey(t, through, kl, res); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, name := range sortedKeys(s.retired) {
		keys := s.retired[name].keys
		for _, ck := range keys.sortedKeys() {
			if kl := keys.at(ck); s.isDue(t, through, kl) {
				if err := s.expireKey(t, through, kl, res); err != nil {
					return nil, err
				}
			}
		}
		s.tidy(t, name)
	}
	if retention > 0 {
		active := map[string]bool{}
		for _, kl := range allLedgers(s) {
			for _, le := range kl.ledger.Leases() {
				active[le.ClientID] = true
			}
		}
		for _, id := range sortedKeys(s.clients) {
			if !active[id] && s.clients[id].lastSeen+retention <= t {
				s.dropClient(id)
			}
		}
	}
	return res, nil
}

func revokeScan(s *state, t int64, clientID string, incarnation uint64) {
	for _, kl := range allLedgers(s) {
		for _, le := range kl.ledger.Leases() {
			if le.ClientID == clientID {
				_, _ = kl.ledger.Revoke(t, clientID, incarnation)
				s.touch(kl)
				break
			}
		}
	}
}

// allLedgers lists every ledger, live then retired, in key order.
func allLedgers(s *state) []*keyLedger {
	var out []*keyLedger
	for _, pn := range sortedKeys(s.keys) {
		for _, ck := range s.keys[pn].sortedKeys() {
			out = append(out, s.keys[pn].at(ck))
		}
	}
	for _, name := range sortedKeys(s.retired) {
		for _, ck := range s.retired[name].keys.sortedKeys() {
			out = append(out, s.retired[name].keys.at(ck))
		}
	}
	return out
}

// scanNextDue is NextDue as it was: a scan of every ledger and floor.
func scanNextDue(s *state) (due int64, ok bool) {
	consider := func(t int64) {
		if !ok || t < due {
			due, ok = t, true
		}
	}
	for _, kl := range allLedgers(s) {
		consider(s.dueOf(kl))
	}
	for _, r := range s.retired {
		if d, has := retiredDue(r); has {
			consider(d)
		}
	}
	return due, ok
}

type dueEntry struct {
	due       int64
	kind      dueKind
	name, key string
}

// checkIndex compares the indexes with ones derived from scratch from the
// replicated state, and checks the heaps' structure.
func checkIndex(s *state) error {
	var want []dueEntry
	holders := map[string]map[*keyLedger]struct{}{}
	add := func(kind dueKind, name, key string, kl *keyLedger) error {
		if kl.item.kind != kind || kl.item.name != name || kl.item.key != key || kl.item.kl != kl {
			return fmt.Errorf("ledger %s/%s (kind %d) is indexed as %d %s/%s", name, key, kind, kl.item.kind, kl.item.name, kl.item.key)
		}
		want = append(want, dueEntry{s.dueOf(kl), kind, name, key})
		for _, le := range kl.ledger.Leases() {
			if holders[le.ClientID] == nil {
				holders[le.ClientID] = map[*keyLedger]struct{}{}
			}
			holders[le.ClientID][kl] = struct{}{}
		}
		return nil
	}
	for pn, keys := range s.keys {
		for ck, kl := range keys.all() {
			if err := add(dueLive, pn, ck, kl); err != nil {
				return err
			}
		}
	}
	for name, r := range s.retired {
		for ck, kl := range r.keys.all() {
			if err := add(dueRetired, name, ck, kl); err != nil {
				return err
			}
		}
		if d, ok := retiredDue(r); ok {
			want = append(want, dueEntry{d, dueFloor, name, ""})
		}
	}
	var got []dueEntry
	for i, it := range s.idx.due {
		if int(it.pos) != i {
			return fmt.Errorf("due entry %s/%s at %d records position %d", it.name, it.key, i, it.pos)
		}
		if i > 0 && it.less(s.idx.due[(i-1)/2]) {
			return fmt.Errorf("due heap out of order at %d", i)
		}
		got = append(got, dueEntry{it.due, it.kind, it.name, it.key})
	}
	order := func(a, b dueEntry) int {
		return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.kind, b.kind), cmp.Compare(a.name, b.name), cmp.Compare(a.key, b.key))
	}
	slices.SortFunc(want, order)
	slices.SortFunc(got, order)
	if !slices.Equal(got, want) {
		return fmt.Errorf("due index %v, rebuilt %v", got, want)
	}
	if len(s.idx.floors) != countFloors(s) {
		return fmt.Errorf("%d floor entries, want %d", len(s.idx.floors), countFloors(s))
	}
	if !maps.EqualFunc(s.idx.holders, holders, func(a, b map[*keyLedger]struct{}) bool { return maps.Equal(a, b) }) {
		return fmt.Errorf("holders index %v, rebuilt %v", holderNames(s.idx.holders), holderNames(holders))
	}
	if len(s.idx.clients) != len(s.clients) {
		return fmt.Errorf("clients index holds %d records, the state %d", len(s.idx.clients), len(s.clients))
	}
	for i, c := range s.idx.clients {
		if c.pos != i || s.clients[c.id] != c {
			return fmt.Errorf("clients index entry %d (%q, pos %d) is not the state's record", i, c.id, c.pos)
		}
		if i > 0 && s.idx.clients.Less(i, (i-1)/2) {
			return fmt.Errorf("clients heap out of order at %d", i)
		}
	}
	return nil
}

func countFloors(s *state) int {
	n := 0
	for _, r := range s.retired {
		if _, ok := retiredDue(r); ok {
			n++
		}
	}
	return n
}

func holderNames(m map[string]map[*keyLedger]struct{}) map[string][]string {
	out := map[string][]string{}
	for id, kls := range m {
		for kl := range kls {
			out[id] = append(out[id], fmt.Sprintf("%d:%s/%s", kl.item.kind, kl.item.name, kl.item.key))
		}
		slices.Sort(out[id])
	}
	return out
}

const indexPolicyYAML = `
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: %d
    burst: %d
    key: %s
    lease: {duration: %ds}
  - name: per-region
    algorithm: token-bucket
    rate: 5
    burst: 5
    key: [region]
    lease: {duration: 2s}
`

func policyCmd(t testing.TB, yaml string) *api.ApplyPoliciesCommand {
	file, err := policy.Parse(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	return cmd
}

// runIndexProperty drives an indexed state and a reference-scan state
// with one random history: acquires, renewals, releases, retries,
// expiries (with margins and retentions), new incarnations, policy
// updates, deletes, re-creations and re-keyings, and switches. After
// every entry the indexed state's indexes must equal ones rebuilt from
// scratch, NextDue must equal a scan's, and both states (results and
// snapshot bytes) must be identical.
func runIndexProperty(rt *rapid.T, outer testing.TB, f fault, cov *indexCoverage) {
	idx, ref := New(nil), New(nil)
	idx.st.fault = f
	ref.st.ref = referenceScan
	var index uint64
	apply := func(ct CommandType, at int64, msg proto.Message) {
		data, err := Encode(ct, at, msg)
		if err != nil {
			outer.Fatal(err)
		}
		index++
		a := idx.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(*Result)
		b := ref.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(*Result)
		if fmt.Sprint(a.Err) != fmt.Sprint(b.Err) || a.Expired != b.Expired || !maps.Equal(a.ExpiredByPolicy, b.ExpiredByPolicy) || len(a.Ops) != len(b.Ops) {
			rt.Fatalf("entry %d (%s): indexed result %+v, reference scan %+v", index, ct, a, b)
		}
		for i := range a.Ops {
			if !proto.Equal(a.Ops[i].Lease, b.Ops[i].Lease) || !proto.Equal(a.Ops[i].Release, b.Ops[i].Release) || fmt.Sprint(a.Ops[i].Err) != fmt.Sprint(b.Ops[i].Err) {
				rt.Fatalf("entry %d (%s) op %d: indexed %v, reference scan %v", index, ct, i, a.Ops[i], b.Ops[i])
			}
		}
		if cov != nil {
			cov.note(idx.st, ct, a)
		}
		if err := checkIndex(idx.st); err != nil {
			rt.Fatalf("entry %d (%s): stale index: %v", index, ct, err)
		}
		if !bytes.Equal(snapshotBytes(outer, idx), snapshotBytes(outer, ref)) {
			rt.Fatalf("entry %d (%s): the indexed state differs from the reference scan's", index, ct)
		}
		gd, gok := idx.NextDue()
		wd, wok := scanNextDue(ref.st)
		if gd != wd || gok != wok {
			rt.Fatalf("entry %d (%s): NextDue %d %v, a scan says %d %v", index, ct, gd, gok, wd, wok)
		}
	}
	type params struct {
		rate, burst, dur int
		key              string
	}
	drawPolicy := func() params {
		return params{
			rate:  rapid.SampledFrom([]int{5, 10, 20}).Draw(rt, "rate"),
			burst: rapid.SampledFrom([]int{10, 20}).Draw(rt, "burst"),
			dur:   rapid.SampledFrom([]int{1, 2, 5}).Draw(rt, "dur"),
			key:   rapid.SampledFrom([]string{"[tenant]", "[tenant]", "[tenant, region]"}).Draw(rt, "key"),
		}
	}
	cur := drawPolicy()
	applyPolicy := func(at int64, p params) {
		apply(CmdApplyPolicies, at, policyCmd(outer, fmt.Sprintf(indexPolicyYAML, p.rate, p.burst, p.key, p.dur)))
		cur = p
	}
	apply(CmdSetFeatures, 0, &api.SetFeaturesCommand{Features: BaselineFeatures})
	applyPolicy(0, cur)
	var at int64
	incs := map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 1}
	seqs := map[string]uint64{}
	leases := map[string]uint64{} // client/policy/tenant -> lease ID
	last := map[string]*api.LeaseBatchCommand{}
	regions := map[string]string{"a": "eu", "b": "us", "c": "eu", "d": "us"}
	n := rapid.IntRange(1, 70).Draw(rt, "n")
	for range n {
		at += rapid.SampledFrom([]int64{0, 1e6, 50e6, 200e6, 700e6, 1500e6, 3 * sec}).Draw(rt, "dt")
		cl := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "client")
		tn := rapid.SampledFrom([]string{"x", "y", "z"}).Draw(rt, "tenant")
		pol := rapid.SampledFrom([]string{"per-tenant", "per-tenant", "per-region"}).Draw(rt, "policy")
		key := &api.Key{Policy: pol, Attributes: map[string]string{"tenant": tn, "region": regions[cl]}}
		lk := cl + "/" + pol + "/" + tn
		if pol == "per-region" {
			lk = cl + "/" + pol + "/" + regions[cl]
		}
		dem := &api.Demand{RateMilliPerSec: rapid.SampledFrom([]int64{0, 3_000, 30_000}).Draw(rt, "dr"), BurstMilli: rapid.SampledFrom([]int64{0, 5_000, 50_000}).Draw(rt, "db")}
		nextCaller := func() *api.Caller {
			seqs[cl]++
			return caller(cl, incs[cl], seqs[cl])
		}
		batch := func(op *api.LeaseOp) {
			cmd := &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}}
			last[cl] = cmd
			apply(CmdLeaseBatch, at, cmd)
		}
		grantFrom := func() {
			// Record the lease the last answer granted (both states agree).
			for _, kl := range idx.Leases(pol, "", at).GetLeases() {
				if kl.GetClientId() == cl && kl.GetIncarnation() == incs[cl] {
					if (pol == "per-tenant" && strings.Contains(kl.GetKey(), tn)) || (pol == "per-region" && strings.Contains(kl.GetKey(), regions[cl])) {
						leases[lk] = kl.GetLeaseId()
					}
				}
			}
		}
		switch op := rapid.IntRange(0, 16).Draw(rt, "op"); op {
		case 0, 1, 2:
			batch(&api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: nextCaller(), Keys: []*api.AcquireKey{{Key: key, Demand: dem}}}}})
			grantFrom()
		case 3, 4:
			batch(&api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: nextCaller(), Keys: []*api.RenewKey{{Key: key, LeaseId: leases[lk], Demand: dem}}}}})
		case 5, 6:
			batch(&api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: nextCaller(), Keys: []*api.ReleaseKey{{Key: key, LeaseId: leases[lk], UnspentMilli: rapid.SampledFrom([]int64{0, 1_000, 50_000}).Draw(rt, "unspent")}}}}})
		case 7:
			if cmd := last[cl]; cmd != nil {
				apply(CmdLeaseBatch, at, cmd) // a retry: answered from the record
			}
		case 8, 9:
			apply(CmdExpire, at, &api.ExpireCommand{
				ClientRetentionNanos: rapid.SampledFrom([]int64{0, sec, 3 * sec, 60 * sec}).Draw(rt, "retention"),
				ExpireThroughNanos:   max(1, at-rapid.SampledFrom([]int64{0, 0, 100e6, sec}).Draw(rt, "margin")),
			})
		case 10:
			// A new incarnation: its first request revokes the old one's leases.
			if cov != nil && len(idx.st.idx.holders[cl]) > 0 {
				cov.revoked++ // the old incarnation's leases are revoked
			}
			incs[cl]++
			seqs[cl] = 0
			batch(&api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: nextCaller(), Keys: []*api.AcquireKey{{Key: key, Demand: dem}}}}})
			grantFrom()
		case 11:
			p := drawPolicy()
			p.key = cur.key
			applyPolicy(at, p) // same keying: reconfigure (or re-create)
		case 12:
			apply(CmdDeletePolicy, at, &api.DeletePolicyCommand{Name: rapid.SampledFrom([]string{"per-tenant", "per-region"}).Draw(rt, "delete")})
		case 13:
			applyPolicy(at, cur) // re-create after a delete: resurrects
		case 14:
			applyPolicy(at, drawPolicy()) // maybe a re-key (refused while leases are live)
		case 15:
			apply(CmdSetFeatures, at, &api.SetFeaturesCommand{Features: KnownFeatures})
		case 16:
			// Re-key once the leases are gone but pools are still low: the
			// old budgets fold into a floor.
			at += int64(cur.dur)*sec + 100e6
			apply(CmdExpire, at, &api.ExpireCommand{})
			p := drawPolicy()
			p.key = map[bool]string{true: "[tenant, region]", false: "[tenant]"}[cur.key == "[tenant]"]
			applyPolicy(at, p)
		}
	}
	// Whatever happened, a restored copy's rebuilt indexes are sound, and
	// everything drains through NextDue.
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snapshotBytes(outer, idx))}); err != nil {
		rt.Fatalf("restore: %v", err)
	}
	if err := checkIndex(g.st); err != nil {
		rt.Fatalf("restored: stale index: %v", err)
	}
	for range 50 {
		due, ok := idx.NextDue()
		if !ok || due > at+3600*sec {
			break
		}
		at = max(at, due)
		apply(CmdExpire, at, &api.ExpireCommand{ClientRetentionNanos: sec})
	}
}

// indexCoverage counts what the random histories reached, so the
// property cannot pass vacuously.
type indexCoverage struct {
	expired, collected, revoked, retiredKeys, floors, dropped int
	keys, leases, clients                                     int
}

func (c *indexCoverage) note(s *state, ct CommandType, r *Result) {
	keys, leases := 0, 0
	for _, kl := range allLedgers(s) {
		keys++
		leases += kl.ledger.LeaseCount()
	}
	if ct == CmdExpire {
		c.expired += r.Expired
		if keys < c.keys {
			c.collected++
		}
		if len(s.clients) < c.clients {
			c.dropped++
		}
	}
	for _, rp := range s.retired {
		c.retiredKeys += rp.keys.Len()
		if rp.fl != (floor{}) {
			c.floors++
		}
	}
	c.keys, c.leases, c.clients = keys, leases, len(s.clients)
}

func TestIndexMatchesRebuildAndScan(t *testing.T) {
	cov := &indexCoverage{}
	rapid.Check(t, func(rt *rapid.T) {
		cov.keys, cov.leases, cov.clients = 0, 0, 0
		runIndexProperty(rt, t, faultNone, cov)
	})
	t.Logf("coverage: %+v", *cov)
	if cov.expired == 0 || cov.collected == 0 || cov.revoked == 0 || cov.retiredKeys == 0 || cov.floors == 0 || cov.dropped == 0 {
		t.Fatalf("the histories never reached part of what the indexes cover: %+v", *cov)
	}
}

// An expire with nothing due leaves the ledgers alone: it visits only
// what is due (FeatureIndexedExpiry).
func TestIndexedExpiryVisitsOnlyWhatIsDue(t *testing.T) {
	h := newHarness(t)
	h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"), tenant("beta")))
	if r := h.apply(CmdExpire, 2*sec, &api.ExpireCommand{ClientRetentionNanos: 600 * sec}); r.Err != nil || r.Expired != 0 {
		t.Fatalf("expire: %v, %d expired", r.Err, r.Expired)
	}
	for ck, kl := range h.f.st.keys["per-tenant"].all() {
		if got := kl.ledger.NowNanos(); got != sec {
			t.Errorf("ledger %s advanced to %d ns by an expire with nothing due, want %d", ck, got, sec)
		}
	}
	if err := checkIndex(h.f.st); err != nil {
		t.Error(err)
	}
}
