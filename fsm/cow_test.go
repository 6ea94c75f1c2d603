package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// Snapshots without stall (cow.go, capture.go): the capture's bytes equal
// the old deep copy's (export_ref_test.go) for random states, and a
// snapshot shows exactly the state at its capture however apply goes on
// while it is persisted (sequentially, concurrently under -race, with
// several captures live at once). The negative control (a renewal that
// changes its ledger in place) must be caught.

// cowDriver applies a random history to one FSM.
type cowDriver struct {
	rt     *rapid.T
	tb     testing.TB
	f      *FSM
	index  uint64
	at     int64
	incs   map[string]uint64
	seqs   map[string]uint64
	leases map[string]uint64 // client/policy/canonical key -> lease ID
	last   map[string]*api.LeaseBatchCommand
	tokens []string
	bulk   int // keys of the bulk client
	// renewed counts successful key renewals (coverage).
	renewed int
}

// cowCoverage counts what the histories reached, so the properties cannot
// pass vacuously.
type cowCoverage struct {
	renewed, clones, shardCopies, captures, concurrentSteps int
}

func (c *cowCoverage) add(d *cowDriver) {
	c.renewed += d.renewed
	c.clones += d.f.st.cow.clones
	c.shardCopies += d.f.st.cow.shardCopies
}

var cowClients = []string{"a", "b", "c", "d"}

func newCowDriver(rt *rapid.T, tb testing.TB, f fault) *cowDriver {
	d := &cowDriver{rt: rt, tb: tb, f: New(nil), incs: map[string]uint64{}, seqs: map[string]uint64{},
		leases: map[string]uint64{}, last: map[string]*api.LeaseBatchCommand{}}
	d.f.st.fault = f
	for _, c := range cowClients {
		d.incs[c] = 1
	}
	d.apply(CmdSetFeatures, &api.SetFeaturesCommand{Features: BaselineFeatures})
	d.applyPolicy(d.drawPolicy("[tenant]"))
	return d
}

func (d *cowDriver) apply(ct CommandType, msg proto.Message) *Result {
	data, err := Encode(ct, d.at, msg)
	if err != nil {
		d.tb.Fatal(err)
	}
	d.index++
	r := d.f.Apply(&raft.Log{Index: d.index, Type: raft.LogCommand, Data: data}).(*Result)
	if ct == CmdLeaseBatch {
		d.noteGrants(msg.(*api.LeaseBatchCommand), r)
	}
	return r
}

func (d *cowDriver) noteGrants(cmd *api.LeaseBatchCommand, r *Result) {
	for i, op := range cmd.GetOps() {
		if op.GetRenew() != nil && r.Ops[i].Lease != nil {
			for _, kl := range r.Ops[i].Lease.GetLeases() {
				if kl.GetGrant() != nil {
					d.renewed++
				}
			}
		}
		acq := op.GetAcquire()
		if acq == nil || r.Ops[i].Lease == nil {
			continue
		}
		for j, kl := range r.Ops[i].Lease.GetLeases() {
			if g := kl.GetGrant(); g != nil && j < len(acq.GetKeys()) {
				d.leases[acq.GetCaller().GetClientId()+"/"+acq.GetKeys()[j].GetKey().GetPolicy()+"/"+g.GetCanonicalKey()] = g.GetLeaseId()
			}
		}
	}
}

func (d *cowDriver) drawPolicy(key string) string {
	return fmt.Sprintf(indexPolicyYAML,
		rapid.SampledFrom([]int{5, 10, 20}).Draw(d.rt, "rate"),
		rapid.SampledFrom([]int{10, 20}).Draw(d.rt, "burst"), key,
		rapid.SampledFrom([]int{1, 2, 5}).Draw(d.rt, "dur"))
}

func (d *cowDriver) applyPolicy(yaml string) { d.apply(CmdApplyPolicies, policyCmd(d.tb, yaml)) }

func (d *cowDriver) caller(c string) *api.Caller {
	d.seqs[c]++
	return caller(c, d.incs[c], d.seqs[c])
}

func (d *cowDriver) batch(c string, op *api.LeaseOp) {
	cmd := &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}}
	d.last[c] = cmd
	d.apply(CmdLeaseBatch, cmd)
}

func (d *cowDriver) bulkLease(tn string) uint64 {
	p, ok := d.f.Policy("per-tenant")
	if !ok {
		return 0
	}
	ck, err := p.CanonicalKey(map[string]string{"tenant": tn, "region": "eu"})
	if err != nil {
		return 0
	}
	return d.leases["bulk/per-tenant/"+ck]
}

func cowKey(pol, tn, region string) *api.Key {
	return &api.Key{Policy: pol, Attributes: map[string]string{"tenant": tn, "region": region}}
}

// addBulk gives client "bulk" n more keys of per-tenant (a larger state,
// so that a Persist takes long enough to overlap apply).
func (d *cowDriver) addBulk(n int) {
	for start := d.bulk; start < d.bulk+n; start += MaxKeysPerOp {
		req := &api.AcquireRequest{Caller: d.caller("bulk")}
		for i := start; i < min(d.bulk+n, start+MaxKeysPerOp); i++ {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: cowKey("per-tenant", "bulk-"+strconv.Itoa(i), "eu"), Demand: &api.Demand{RateMilliPerSec: 1, BurstMilli: 1}})
		}
		d.batch("bulk", &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}})
	}
	d.bulk += n
}

// step applies one random entry: lease ops on 1–4 keys among 24 tenants
// and a region policy, retries, expiries, new incarnations, policy
// changes, deletes and re-creations, switches, ACL tokens, and bulk
// renewals.
func (d *cowDriver) step() {
	rt := d.rt
	d.at += rapid.SampledFrom([]int64{0, 1e6, 50e6, 200e6, 700e6, 1500e6, 3 * sec}).Draw(rt, "dt")
	c := rapid.SampledFrom(cowClients).Draw(rt, "client")
	region := map[string]string{"a": "eu", "b": "us", "c": "eu", "d": "us"}[c]
	keys := func() []*api.Key {
		var out []*api.Key
		seen := map[string]bool{}
		for range rapid.IntRange(1, 4).Draw(rt, "nkeys") {
			pol := rapid.SampledFrom([]string{"per-tenant", "per-tenant", "per-region"}).Draw(rt, "policy")
			tn := "t" + strconv.Itoa(rapid.IntRange(0, 23).Draw(rt, "tenant"))
			if id := pol + tn + region; !seen[id] || pol == "per-region" {
				seen[id] = true
				out = append(out, cowKey(pol, tn, region))
			}
		}
		return out
	}
	leaseOf := func(k *api.Key) uint64 {
		p, ok := d.f.Policy(k.GetPolicy())
		if !ok {
			return 0
		}
		ck, err := p.CanonicalKey(k.GetAttributes())
		if err != nil {
			return 0
		}
		return d.leases[c+"/"+k.GetPolicy()+"/"+ck]
	}
	dem := &api.Demand{RateMilliPerSec: rapid.SampledFrom([]int64{0, 3_000, 30_000}).Draw(rt, "dr"), BurstMilli: rapid.SampledFrom([]int64{0, 5_000, 50_000}).Draw(rt, "db")}
	switch op := rapid.IntRange(0, 19).Draw(rt, "op"); op {
	case 0, 1, 2:
		req := &api.AcquireRequest{Caller: d.caller(c)}
		for _, k := range keys() {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: k, Demand: dem})
		}
		d.batch(c, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}})
	case 3, 4, 5:
		req := &api.RenewRequest{Caller: d.caller(c)}
		for _, k := range keys() {
			req.Keys = append(req.Keys, &api.RenewKey{Key: k, LeaseId: leaseOf(k), Demand: dem, AckedVersion: uint64(rapid.IntRange(0, 3).Draw(rt, "ack"))})
		}
		d.batch(c, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: req}})
	case 6:
		req := &api.ReleaseRequest{Caller: d.caller(c)}
		for _, k := range keys() {
			req.Keys = append(req.Keys, &api.ReleaseKey{Key: k, LeaseId: leaseOf(k), UnspentMilli: rapid.SampledFrom([]int64{0, 1_000, 50_000}).Draw(rt, "unspent")})
		}
		d.batch(c, &api.LeaseOp{Op: &api.LeaseOp_Release{Release: req}})
	case 7:
		if cmd := d.last[c]; cmd != nil {
			d.apply(CmdLeaseBatch, cmd) // a retry
		}
	case 8, 9:
		d.apply(CmdExpire, &api.ExpireCommand{
			ClientRetentionNanos: rapid.SampledFrom([]int64{0, sec, 60 * sec}).Draw(rt, "retention"),
			ExpireThroughNanos:   max(1, d.at-rapid.SampledFrom([]int64{0, 0, 100e6, sec}).Draw(rt, "margin")),
		})
	case 10:
		d.incs[c]++
		d.seqs[c] = 0
		d.batch(c, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: d.caller(c), Keys: []*api.AcquireKey{{Key: keys()[0], Demand: dem}}}}})
	case 11:
		d.applyPolicy(d.drawPolicy("[tenant]"))
	case 12:
		d.apply(CmdDeletePolicy, &api.DeletePolicyCommand{Name: rapid.SampledFrom([]string{"per-tenant", "per-region"}).Draw(rt, "delete")})
	case 13:
		d.applyPolicy(d.drawPolicy(rapid.SampledFrom([]string{"[tenant]", "[tenant, region]"}).Draw(rt, "keying")))
	case 14:
		d.apply(CmdSetFeatures, &api.SetFeaturesCommand{Features: KnownFeatures}) // changes nothing
	case 15:
		// ACL tokens (with the switch on): bootstrap, create, delete.
		if d.f.Features()&FeatureACL == 0 {
			return
		}
		id := fmt.Sprintf("tok-%d", len(d.tokens))
		role := acl.Management
		if len(d.tokens) > 0 {
			role = acl.Client
		}
		tok, _ := testToken(d.tb, id, role)
		switch {
		case !d.f.ACLBootstrapped():
			d.apply(CmdACL, bootstrapCmd(tok))
		case len(d.tokens) > 1 && rapid.Bool().Draw(rt, "deltok"):
			d.apply(CmdACL, deleteCmd(d.tokens[len(d.tokens)-1]))
			d.tokens = d.tokens[:len(d.tokens)-1]
			return
		default:
			d.apply(CmdACL, createCmd(tok))
		}
		d.tokens = append(d.tokens, id)
	case 16, 17:
		// The bulk client renews a random run of its keys.
		if d.bulk == 0 {
			return
		}
		from := rapid.IntRange(0, d.bulk-1).Draw(rt, "from")
		req := &api.RenewRequest{Caller: d.caller("bulk")}
		for i := from; i < min(d.bulk, from+200); i++ {
			tn := "bulk-" + strconv.Itoa(i)
			req.Keys = append(req.Keys, &api.RenewKey{Key: cowKey("per-tenant", tn, "eu"), LeaseId: d.bulkLease(tn), Demand: &api.Demand{RateMilliPerSec: 1, BurstMilli: 1}})
		}
		d.batch("bulk", &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: req}})
	case 18:
		d.addBulk(rapid.IntRange(1, 300).Draw(rt, "more"))
	case 19:
		// Expire well past every lease: collects keys (deletes in the maps).
		d.at += 6 * sec
		d.apply(CmdExpire, &api.ExpireCommand{ClientRetentionNanos: sec})
	}
}

// refBytes is the old path's snapshot of st: export and writeSnapshot.
func refBytes(tb testing.TB, st *state) []byte {
	var b bytes.Buffer
	if err := writeSnapshot(&b, st.export()); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func captureBytes(tb testing.TB, f *FSM) []byte {
	f.mu.Lock()
	cp := f.st.capture(f)
	f.mu.Unlock()
	defer cp.done()
	var b bytes.Buffer
	if err := writeCapture(&b, cp); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestCaptureMatchesExport: for random states (every entry of a random
// history), the capture's snapshot is byte-identical to the old deep
// copy's, and so is StateHash.
func TestCaptureMatchesExport(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := newCowDriver(rt, t, faultNone)
		if rapid.Bool().Draw(rt, "bulk") {
			d.addBulk(rapid.IntRange(1, 1500).Draw(rt, "bulkKeys"))
		}
		for i := range rapid.IntRange(1, 60).Draw(rt, "n") {
			d.step()
			want := refBytes(t, d.f.st)
			if got := captureBytes(t, d.f); !bytes.Equal(got, want) {
				rt.Fatalf("entry %d: capture %d bytes (sha %s), old export %d bytes (sha %s)", i, len(got), sha(got)[:12], len(want), sha(want)[:12])
			}
			if _, h := d.f.StateHash(); h != sha(want) {
				rt.Fatalf("entry %d: StateHash %s, old export's %s", i, h, sha(want))
			}
		}
		if len(d.f.st.cow.live) != 0 {
			rt.Fatalf("%d captures still live after done", len(d.f.st.cow.live))
		}
	})
}

type pending struct {
	snap raft.FSMSnapshot
	want string // sha of the old path's bytes at capture
}

func persist(s raft.FSMSnapshot) ([]byte, error) {
	var sink bufSink
	err := s.Persist(&sink)
	s.Release()
	return sink.Bytes(), err
}

// checkPersisted compares a persisted snapshot with its capture's hash,
// and restores it to check the restored state's own snapshot too.
func checkPersisted(rt *rapid.T, tb testing.TB, b []byte, want, what string) {
	if got := sha(b); got != want {
		rt.Fatalf("%s: the persisted snapshot (sha %s) is not the state at its capture (sha %s)", what, got[:12], want[:12])
	}
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(b)}); err != nil {
		rt.Fatalf("%s: restore: %v", what, err)
	}
	if got := sha(refBytes(tb, g.st)); got != want {
		rt.Fatalf("%s: the restored state (sha %s) is not the state at capture (sha %s)", what, got[:12], want[:12])
	}
}

// runPointInTime: random history; at random points a snapshot is
// captured (several may be live at once) while entries keep applying;
// each is persisted later, in a random order, and must equal the state at
// its capture. Sequential: the same goroutine applies and persists.
func runPointInTime(rt *rapid.T, tb testing.TB, f fault, cov *cowCoverage) {
	d := newCowDriver(rt, tb, f)
	if rapid.Bool().Draw(rt, "bulk") {
		d.addBulk(rapid.IntRange(1, 1200).Draw(rt, "bulkKeys"))
	}
	var live []pending
	for range rapid.IntRange(1, 60).Draw(rt, "n") {
		switch rapid.IntRange(0, 9).Draw(rt, "what") {
		case 0, 1:
			want := sha(refBytes(tb, d.f.st))
			s, err := d.f.Snapshot()
			if err != nil {
				rt.Fatal(err)
			}
			live = append(live, pending{s, want})
			if cov != nil {
				cov.captures++
			}
		case 2:
			if len(live) > 0 {
				i := rapid.IntRange(0, len(live)-1).Draw(rt, "which")
				b, err := persist(live[i].snap)
				if err != nil {
					rt.Fatalf("persist: %v", err)
				}
				checkPersisted(rt, tb, b, live[i].want, "mid-history")
				live = append(live[:i], live[i+1:]...)
			}
		default:
			d.step()
		}
	}
	for _, p := range live {
		b, err := persist(p.snap)
		if err != nil {
			rt.Fatalf("persist: %v", err)
		}
		checkPersisted(rt, tb, b, p.want, "at the end")
	}
	if len(d.f.st.cow.live) != 0 {
		rt.Fatalf("%d captures still live after Persist and Release", len(d.f.st.cow.live))
	}
	if cov != nil {
		cov.add(d)
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	cov := &cowCoverage{}
	rapid.Check(t, func(rt *rapid.T) { runPointInTime(rt, t, faultNone, cov) })
	t.Logf("coverage: %+v", *cov)
	if cov.renewed == 0 || cov.clones == 0 || cov.shardCopies == 0 || cov.captures == 0 {
		t.Fatalf("the histories never reached part of the copy-on-write: %+v", *cov)
	}
}

// TestSnapshotPersistConcurrentWithApply: Persist runs on its own
// goroutine while the history goes on (and queries read the same ledgers);
// run under -race this also checks the copy-on-write's synchronisation.
func TestSnapshotPersistConcurrentWithApply(t *testing.T) {
	cov := &cowCoverage{}
	rapid.Check(t, func(rt *rapid.T) {
		d := newCowDriver(rt, t, faultNone)
		d.addBulk(rapid.IntRange(500, 3000).Draw(rt, "bulkKeys"))
		for range rapid.IntRange(0, 10).Draw(rt, "prefix") {
			d.step()
		}
		want := sha(refBytes(t, d.f.st))
		s, err := d.f.Snapshot()
		if err != nil {
			rt.Fatal(err)
		}
		type out struct {
			b   []byte
			err error
		}
		done := make(chan out, 1)
		go func() {
			b, err := persist(s)
			done <- out{b, err}
		}()
		queries := make(chan struct{})
		go func() {
			defer close(queries)
			for range 20 {
				d.f.Counts()
				d.f.Leases("per-tenant", "", 0)
			}
		}()
		var res out
		for running := true; running; {
			select {
			case res = <-done:
				running = false
			default:
				d.step()
				cov.concurrentSteps++
			}
		}
		<-queries
		if res.err != nil {
			rt.Fatalf("persist: %v", res.err)
		}
		checkPersisted(rt, t, res.b, want, "concurrent")
		// The state went on correctly too: its own snapshot is the old path's.
		if got, want := captureBytes(t, d.f), refBytes(t, d.f.st); !bytes.Equal(got, want) {
			rt.Fatalf("after the concurrent persist: capture and old export differ")
		}
		cov.add(d)
	})
	t.Logf("coverage: %+v", *cov)
	if cov.concurrentSteps == 0 || cov.clones == 0 {
		t.Fatalf("no entry was applied while a snapshot was persisted: %+v", *cov)
	}
}
