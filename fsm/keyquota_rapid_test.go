package fsm

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"

	"github.com/ration-dev/ration/api"
	"pgregory.net/rapid"
)

// The key-quota property (keyquota.go, docs/policy.md#max_keys_per_value):
// random histories of acquires by several tenants, releases, expiries,
// policy changes (max_keys, max_keys_per_value). Before every acquire the
// model reads the keys the state tracks and predicts the one rule: a new
// key is refused (RESOURCE_EXHAUSTED) exactly when the policy tracks
// max_keys keys, or when its tenant already has the policy's cap of them
// (max_keys_per_value, by default max(1, max_keys/10)); keys nobody holds
// whose buckets are full again (collectable) do not count. So a tenant
// under its cap is never refused while the policy has room, whatever the
// others hold; and no tenant ever creates a key beyond its cap.

type quotaParams struct {
	maxKeys, perValue int // perValue 0: the default
}

func (p quotaParams) yaml() string {
	per := ""
	if p.perValue > 0 {
		per = fmt.Sprintf("    max_keys_per_value: %d\n", p.perValue)
	}
	return fmt.Sprintf(`
policies:
  - name: q
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant, route]
    lease: {duration: 2s}
    max_keys: %d
%s`, p.maxKeys, per)
}

// cap is the model's max_keys_per_value, computed here, not by the code
// under test.
func (p quotaParams) cap() int {
	if p.perValue > 0 {
		return p.perValue
	}
	return max(1, p.maxKeys/10)
}

func drawQuotaParams(t *rapid.T) quotaParams {
	return quotaParams{
		maxKeys:  rapid.IntRange(3, 24).Draw(t, "max_keys"),
		perValue: rapid.SampledFrom([]int{0, 1, 2, 3, 5, 30}).Draw(t, "max_keys_per_value"),
	}
}

// quotaTenants include a value with a '/' (escaped in the canonical key)
// and one that is a prefix of another.
var quotaTenants = []string{"acme", "acme2", "glo/bex", "initech"}

type quotaLease struct {
	client string
	key    *api.Key
	id     uint64
}

func runKeyQuota(t *rapid.T, outer testing.TB, f fault) {
	h := &harness{t: outer, f: New(nil)}
	at := int64(0)
	if f != faultNone {
		h.f.st.fault = f
	}
	h.enableFeatures(BaselineFeatures)
	var p quotaParams
	apply := func(np quotaParams) {
		h.applyYAML(at, np.yaml())
		p = np
	}
	apply(drawQuotaParams(t))
	tenantOf := map[string]string{} // canonical key -> tenant
	seqs := map[string]uint64{}
	var held []quotaLease
	steps := rapid.IntRange(10, 80).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
		case op <= 5:
			tn := rapid.SampledFrom(quotaTenants).Draw(t, "tenant")
			route := fmt.Sprintf("r%d", rapid.IntRange(0, 7).Draw(t, "route"))
			client := rapid.SampledFrom([]string{"c1", "c2"}).Draw(t, "client")
			ck := url.PathEscape(tn) + "/" + url.PathEscape(route)
			tenantOf[ck] = tn
			keys := h.f.st.keys["q"]
			isNew, mine, all := true, 0, 0
			var kept []string // what the acquire must not collect
			for _, k := range keys.sortedKeys() {
				isNew = isNew && k != ck
				if l := keys.at(k).ledger; l.LeaseCount() == 0 && l.PoolFullAt() <= at {
					continue // collectable: does not count
				}
				kept = append(kept, k)
				all++
				if tenantOf[k] == tn {
					mine++
				}
			}
			refuse := isNew && (all >= p.maxKeys || mine >= p.cap())
			seqs[client]++
			k := &api.Key{Policy: "q", Attributes: map[string]string{"tenant": tn, "route": route}}
			ops := h.batch(at, acquire(caller(client, 1, seqs[client]), k))
			if ops[0].Err != nil {
				t.Fatalf("acquire: %v", ops[0].Err)
			}
			for _, k := range kept {
				if h.f.st.keys["q"].at(k) == nil {
					t.Fatalf("collected key %q, which someone holds or whose bucket is not full again", k)
				}
			}
			kl := ops[0].Lease.GetLeases()[0]
			exhausted := kl.GetError().GetKind() == api.ErrorKind_ERROR_KIND_RESOURCE_EXHAUSTED
			switch {
			case refuse && !exhausted:
				t.Fatalf("key quota broken: tenant %q created key %q with %d of its keys and %d in all held (max_keys %d, cap %d): %v", tn, ck, mine, all, p.maxKeys, p.cap(), kl)
			case !refuse && exhausted:
				t.Fatalf("tenant %q refused key %q with %d of its keys and %d in all held (max_keys %d, cap %d): %v", tn, ck, mine, all, p.maxKeys, p.cap(), kl.GetError())
			case kl.GetGrant() != nil:
				held = append(held, quotaLease{client, k, kl.GetGrant().GetLeaseId()})
			}
		case op == 6 && len(held) > 0:
			j := rapid.IntRange(0, len(held)-1).Draw(t, "release")
			l := held[j]
			held = append(held[:j], held[j+1:]...)
			seqs[l.client]++
			h.batch(at, releaseOp(caller(l.client, 1, seqs[l.client]), l.key, l.id, 1<<40))
		case op == 7:
			at += rapid.Int64Range(0, 3*sec).Draw(t, "advance")
			h.apply(CmdExpire, at, &api.ExpireCommand{})
		default:
			apply(drawQuotaParams(t))
		}
		checkGroups(t, h.f.st, "after a step")
	}
	snap := snapshotBytes(outer, h.f)
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(snap, snapshotBytes(outer, g)) {
		t.Fatal("restore not identical")
	}
	checkGroups(t, g.st, "after a restore")
}

// checkGroups: every key map's group counts are its keys', recounted.
func checkGroups(t *rapid.T, s *state, when string) {
	for pn, keys := range s.keys {
		want := map[string]int{}
		for k := range keys.all() {
			if g, ok := keyGroup(k); ok {
				want[g]++
			}
		}
		if len(want) != len(keys.groups) {
			t.Fatalf("%s: policy %q has %d groups counted, %d by its keys", when, pn, len(keys.groups), len(want))
		}
		for g, n := range want {
			if keys.group(g) != n {
				t.Fatalf("%s: policy %q group %q counted %d, has %d keys", when, pn, g, keys.group(g), n)
			}
		}
	}
}

func TestKeyQuotaProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { runKeyQuota(rt, t, faultNone) })
}

// setRapidFlags makes a negative control's search long enough and its
// shrinking short, for the test's duration.
func setRapidFlags(t *testing.T, checks string) {
	rapidcontrol.ControlFlags(t, checks)
}
