package fsm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/protobuf/proto"
)

// Recorded logs: logs of real entries, checked in under testdata/logs
// with the state hash (FSM.StateHash) after every recordEvery steps, after
// every restore and at the end. TestRecordedLogs replays each on a fresh
// FSM and compares every hash, so a refactor that changes what a log
// applies to fails here. The logs cover all three kinds of policy
// (token-bucket, window, concurrency slots): acquires, renewals,
// releases, expiries, new incarnations (revocations), policy changes and
// deletions, window clock re-syncs and slews, key quotas, ACL entries, a
// Raft snapshot restored into a fresh FSM and an operator's restore
// (PrepareRestore) in the middle.
//
// A log is written once, by the version it records, and never rewritten:
//
//	go test ./fsm -run TestRecordedLogs -update-logs
var updateLogs = flag.Bool("update-logs", false, "write fsm/testdata/logs (new logs only)")

const recordEvery = 5

// logStep is one step of a recorded log: an entry applied (Index, Data),
// the current state saved as a named snapshot (Save), a Raft restore of a
// saved snapshot into a fresh FSM (Restore), or an operator's restore of
// one (OperatorRestore: PrepareRestore against the current state, then
// Restore). Hash, when set, is the state hash after the step.
type logStep struct {
	Index           uint64 `json:"index,omitempty"`
	Data            []byte `json:"data,omitempty"`
	Save            string `json:"save,omitempty"`
	Restore         string `json:"restore,omitempty"`
	OperatorRestore string `json:"operator_restore,omitempty"`
	Hash            string `json:"hash,omitempty"`
}

type recordedLog struct {
	Comment string    `json:"comment"`
	Steps   []logStep `json:"steps"`
	Final   string    `json:"final"`
}

// logRunner applies a recorded log's steps (recording or replaying).
type logRunner struct {
	t     testing.TB
	f     *FSM
	index uint64
	saved map[string][]byte
}

func (r *logRunner) step(s logStep) *Result {
	r.t.Helper()
	switch {
	case s.Data != nil:
		r.index = s.Index
		res, _ := r.f.Apply(&raft.Log{Index: s.Index, Type: raft.LogCommand, Data: s.Data}).(*Result)
		return res
	case s.Save != "":
		r.saved[s.Save] = snapshotBytes(r.t, r.f)
	case s.Restore != "":
		g := New(nil)
		if err := g.Restore(nopCloser{bytes.NewReader(r.saved[s.Restore])}); err != nil {
			r.t.Fatal(err)
		}
		r.f = g
	case s.OperatorRestore != "":
		prepared, err := PrepareRestore(r.saved[s.OperatorRestore], r.f.RestoreBase())
		if err != nil {
			r.t.Fatal(err)
		}
		if err := r.f.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
			r.t.Fatal(err)
		}
	default:
		r.t.Fatalf("empty step %+v", s)
	}
	return nil
}

func (r *logRunner) hash() string { _, h := r.f.StateHash(); return h }

// logRecorder builds a log while applying it.
type logRecorder struct {
	logRunner
	log recordedLog
	rng *rand.Rand
	at  int64
	// seen counts what the history reached ("grant window", "expired",
	// ...), for TestRecordedLogCovers.
	seen map[string]int
}

func (r *logRecorder) do(s logStep) *Result {
	r.t.Helper()
	res := r.step(s)
	if n := len(r.log.Steps) + 1; n%recordEvery == 0 || s.Data == nil {
		s.Hash = r.hash()
	}
	r.log.Steps = append(r.log.Steps, s)
	return res
}

func (r *logRecorder) apply(ct CommandType, msg proto.Message) *Result {
	r.t.Helper()
	data, err := Encode(ct, r.at, msg)
	if err != nil {
		r.t.Fatal(err)
	}
	res := r.do(logStep{Index: r.index + 1, Data: data})
	if res == nil {
		r.t.Fatalf("entry %d (%s) gave no result", r.index, ct)
	}
	return res
}

func parsePolicies(t testing.TB, yaml string) *api.ApplyPoliciesCommand {
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

const recordedPolicies = `
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease: {duration: 5s}
    max_keys: 4
    max_leases_per_key: 3
  - name: global
    algorithm: token-bucket
    rate: 100
    burst: 100
  - name: q
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant, route]
    lease: {duration: 2s}
    max_keys: 6
    max_keys_per_value: 2
  - name: daily
    algorithm: fixed-window
    limit: 10
    window: 2s
    key: [tenant]
    max_keys: 3
  - name: monthly
    algorithm: fixed-window
    limit: 1000
    period: month
    timezone: Europe/Paris
  - name: approx
    algorithm: sliding-window-approx
    limit: 8
    window: 2s
    key: [tenant]
  - name: inflight
    algorithm: concurrency
    limit: 4
    max_duration: 2s
    key: [tenant]
    max_keys: 3
`

// recordedPolicy returns the one policy of recordedPolicies named name,
// changed by edit (a YAML line replaced), as a command.
func recordedPolicy(t testing.TB, name string, edits ...string) *api.ApplyPoliciesCommand {
	all := parsePolicies(t, recordedPolicies)
	for _, p := range all.Policies {
		if p.GetName() != name {
			continue
		}
		for i := 0; i+1 < len(edits); i += 2 {
			edits := edits[i : i+2]
			switch edits[0] {
			case "rate":
				fmt.Sscan(edits[1], &p.RateMilliPerSec)
			case "limit":
				fmt.Sscan(edits[1], &p.LimitMilli)
			case "key":
				p.Key = strings.Split(edits[1], ",")
			}
		}
		return &api.ApplyPoliciesCommand{Policies: []*api.PolicySpec{p}}
	}
	t.Fatalf("no policy %q", name)
	return nil
}

type heldLease struct {
	key     *api.Key
	id      uint64
	version uint64
}

type logClient struct {
	id       string
	inc, seq uint64
	held     []heldLease
}

func (c *logClient) caller() *api.Caller {
	c.seq++
	return &api.Caller{ClientId: c.id, Incarnation: c.inc, Seq: c.seq}
}

var recordedKinds = map[string]string{"per-tenant": "token", "global": "token", "q": "token", "daily": "window", "monthly": "window", "approx": "window", "inflight": "slot"}

func (r *logRecorder) pick(xs ...string) string { return xs[r.rng.IntN(len(xs))] }

func (r *logRecorder) key(pol string) *api.Key {
	k := &api.Key{Policy: pol, Attributes: map[string]string{}}
	switch pol {
	case "global", "monthly":
	case "q":
		k.Attributes["tenant"], k.Attributes["route"] = r.pick("a", "b"), r.pick("r1", "r2", "r3")
	default:
		k.Attributes["tenant"] = r.pick("a", "b", "c", "d", "e")
	}
	if r.rng.IntN(8) == 0 {
		k.Attributes["region"] = r.pick("eu", "us")
	}
	return k
}

func (r *logRecorder) demand(pol string) *api.Demand {
	switch recordedKinds[pol] {
	case "window":
		return &api.Demand{RateMilliPerSec: r.rng.Int64N(6000), MaxCostMilli: 1000}
	case "slot":
		return &api.Demand{BurstMilli: r.rng.Int64N(4) * 1000}
	}
	return &api.Demand{RateMilliPerSec: r.rng.Int64N(20_000), BurstMilli: r.rng.Int64N(30_000), MaxCostMilli: r.rng.Int64N(3) * 1000}
}

var recordedPolicyNames = []string{"per-tenant", "global", "q", "daily", "monthly", "approx", "inflight"}

// leaseOp draws one op of client c: an acquire, or a renewal or release
// of a lease it holds.
func (r *logRecorder) leaseOp(c *logClient) (*api.LeaseOp, func(*OpResult)) {
	n := r.rng.IntN(10)
	if len(c.held) == 0 || n < 4 {
		pol := r.pick(recordedPolicyNames...)
		req := &api.AcquireRequest{Caller: c.caller()}
		for range 1 + r.rng.IntN(2) {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: r.key(pol), Demand: r.demand(pol)})
			pol = r.pick(recordedPolicyNames...)
		}
		return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}}, func(o *OpResult) {
			for i, kl := range o.Lease.GetLeases() {
				if g := kl.GetGrant(); g != nil {
					r.seen["grant "+recordedKinds[req.Keys[i].GetKey().GetPolicy()]]++
					c.held = append(c.held, heldLease{key: req.Keys[i].GetKey(), id: g.GetLeaseId(), version: g.GetVersion()})
				}
			}
		}
	}
	i := r.rng.IntN(len(c.held))
	h := c.held[i]
	if n < 8 {
		rk := &api.RenewKey{Key: h.key, LeaseId: h.id, Demand: r.demand(h.key.GetPolicy())}
		if r.rng.IntN(3) > 0 {
			rk.AckedVersion = h.version
		}
		if recordedKinds[h.key.GetPolicy()] == "token" && r.rng.IntN(4) == 0 {
			rk.ClampedMilli = r.rng.Int64N(2000)
		}
		return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c.caller(), Keys: []*api.RenewKey{rk}}}}, func(o *OpResult) {
			if g := o.Lease.GetLeases()[0].GetGrant(); g != nil {
				r.seen["renew "+recordedKinds[h.key.GetPolicy()]]++
				c.held[i].id, c.held[i].version = g.GetLeaseId(), g.GetVersion()
			} else if o.Lease != nil {
				c.held = append(c.held[:i], c.held[i+1:]...)
			}
		}
	}
	rk := &api.ReleaseKey{Key: h.key, LeaseId: h.id, UnspentMilli: r.rng.Int64N(5000)}
	return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c.caller(), Keys: []*api.ReleaseKey{rk}}}}, func(o *OpResult) {
		if o.Release != nil {
			if o.Release.GetResults()[0].GetError() == nil {
				r.seen["release "+recordedKinds[h.key.GetPolicy()]]++
			}
			c.held = append(c.held[:i], c.held[i+1:]...)
		}
	}
}

// recordLog writes the "kinds" log: the history described above.
func recordLog(t testing.TB) (recordedLog, map[string]int) {
	r := &logRecorder{logRunner: logRunner{t: t, f: New(nil), saved: map[string][]byte{}}, rng: rand.New(rand.NewPCG(7, 11)), seen: map[string]int{}}
	r.log.Comment = "all three kinds of policy; written by fsm/recorded_log_test.go, never rewritten"
	r.apply(CmdSetFeatures, &api.SetFeaturesCommand{Features: BaselineFeatures, WallUnixNanos: wallAtSwitch})
	if res := r.apply(CmdApplyPolicies, parsePolicies(t, recordedPolicies)); res.Err != nil {
		t.Fatal(res.Err)
	}
	clients := make([]*logClient, 6)
	for i := range clients {
		clients[i] = &logClient{id: fmt.Sprint("c", i), inc: 1}
	}
	// Fixed hashes (testToken's are salted at random): the generator
	// writes the same log every time.
	mgmt := TokenToProto(&acl.Token{AccessorID: "mgmt", Name: "n-mgmt", Role: acl.Management, Hash: acl.Hash{Salt: [16]byte{1}, Sum: [32]byte{2}}, CreateTimeNanos: 1})
	tok := TokenToProto(&acl.Token{AccessorID: "acme", Name: "n-acme", Role: acl.Client, Hash: acl.Hash{Salt: [16]byte{3}, Sum: [32]byte{4}}, CreateTimeNanos: 1,
		ClientIDs: []string{"acme-*"}, Bindings: []acl.Binding{{Policy: "per-tenant", Matches: []acl.Match{{Attribute: "tenant", Value: "a", Prefix: true}}}}})
	for round := range 200 {
		r.at += r.rng.Int64N(700) * int64(1e6)
		switch round {
		case 10:
			r.apply(CmdACL, bootstrapCmd(mgmt))
		case 20:
			r.apply(CmdACL, createCmd(tok))
		case 30:
			r.apply(CmdACL, deleteCmd(tok.GetAccessorId()))
		case 40:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "per-tenant", "rate", "20000"))
		case 50:
			r.apply(CmdWindowClock, &api.WindowClockCommand{WallUnixNanos: r.f.st.windowTime(r.at) + 3*sec})
		case 60:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "inflight", "limit", "2000"))
		case 65:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "inflight", "key", "tenant,region"))
		case 70:
			r.do(logStep{Save: "mid"})
		case 71:
			r.do(logStep{Restore: "mid"})
		case 80:
			r.apply(CmdDeletePolicy, &api.DeletePolicyCommand{Name: "global"})
		case 85:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "approx", "key", "tenant,region"))
		case 90:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "q", "key", "tenant"))
		case 95:
			r.apply(CmdWindowClock, &api.WindowClockCommand{WallUnixNanos: r.f.st.windowTime(r.at) - 2*sec, Slew: true})
		case 100:
			r.apply(CmdSetFeatures, &api.SetFeaturesCommand{Features: FeatureLeftoverBurst | FeatureWindowIdleCarry})
		case 110:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "global"))
		case 120:
			r.do(logStep{OperatorRestore: "mid"})
			for _, c := range clients {
				c.held = nil
			}
		case 130:
			r.apply(CmdDeletePolicy, &api.DeletePolicyCommand{Name: "daily"})
			r.apply(CmdDeletePolicy, &api.DeletePolicyCommand{Name: "inflight"})
		case 150:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "daily"))
			r.apply(CmdApplyPolicies, recordedPolicy(t, "inflight"))
		case 170:
			r.apply(CmdApplyPolicies, recordedPolicy(t, "daily", "key", "tenant,region"))
		}
		switch n := r.rng.IntN(20); {
		case n < 3:
			cmd := &api.ExpireCommand{ClientRetentionNanos: 3 * sec}
			if n == 0 {
				cmd.ExpireThroughNanos = max(r.at-500*int64(1e6), 1)
			}
			for pn, n := range r.apply(CmdExpire, cmd).ExpiredByPolicy {
				r.seen["expired "+recordedKinds[pn]] += n
			}
			continue
		case n == 3:
			c := clients[r.rng.IntN(len(clients))]
			c.inc++
			if len(c.held) > 0 {
				r.seen["revoke"]++
			}
			c.held = nil
		}
		var ops []*api.LeaseOp
		var after []func(*OpResult)
		for _, ci := range r.rng.Perm(len(clients))[:1+r.rng.IntN(3)] {
			op, fn := r.leaseOp(clients[ci])
			ops, after = append(ops, op), append(after, fn)
		}
		res := r.apply(CmdLeaseBatch, &api.LeaseBatchCommand{Ops: ops})
		for i := range res.Ops {
			if res.Ops[i].Err == nil {
				after[i](&res.Ops[i])
			}
		}
	}
	r.at += 30 * sec
	r.apply(CmdExpire, &api.ExpireCommand{ClientRetentionNanos: sec})
	r.log.Final = r.hash()
	return r.log, r.seen
}

func TestRecordedLogs(t *testing.T) {
	dir := filepath.Join("testdata", "logs")
	if *updateLogs {
		path := filepath.Join(dir, "kinds.json")
		if _, err := os.Stat(path); err != nil { // never rewrite a recorded log
			l, _ := recordLog(t)
			b, err := json.MarshalIndent(l, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("recorded logs %v (%v)", logs, err)
	}
	for _, path := range logs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var l recordedLog
			if err := json.Unmarshal(raw, &l); err != nil {
				t.Fatal(err)
			}
			r := &logRunner{t: t, f: New(nil), saved: map[string][]byte{}}
			hashes := 0
			for i, s := range l.Steps {
				want := s.Hash
				r.step(s)
				if want == "" {
					continue
				}
				hashes++
				if got := r.hash(); got != want {
					t.Fatalf("%s: step %d (log index %d): state hash %s, recorded %s", path, i, s.Index, got, want)
				}
			}
			if got := r.hash(); got != l.Final {
				t.Fatalf("%s: final state hash %s, recorded %s", path, got, l.Final)
			}
			if hashes < len(l.Steps)/recordEvery {
				t.Fatalf("%s: only %d hashes recorded for %d steps", path, hashes, len(l.Steps))
			}
		})
	}
}

// TestRecordedLogCovers: the recorded log's history reaches every kind
// and every path it is meant to (so it cannot pass vacuously): checked
// by regenerating it in memory, where the recorder sees the answers.
func TestRecordedLogCovers(t *testing.T) {
	l, seen := recordLog(t)
	t.Logf("reached: %v", seen)
	for _, kind := range []string{"token", "window", "slot"} {
		for _, what := range []string{"grant", "renew", "release", "expired"} {
			if seen[what+" "+kind] == 0 {
				t.Errorf("no %s %s", what, kind)
			}
		}
	}
	if seen["revoke"] == 0 {
		t.Error("no new incarnation of a client holding leases")
	}
	// The generator is deterministic: on a version that applies the log
	// as the recorded one did, it writes the same log.
	raw, err := os.ReadFile(filepath.Join("testdata", "logs", "kinds.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec recordedLog
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Final != l.Final || len(rec.Steps) != len(l.Steps) {
		t.Errorf("the generator wrote another log: final %s (%d steps), recorded %s (%d steps)", l.Final, len(l.Steps), rec.Final, len(rec.Steps))
	}
	types := map[CommandType]int{}
	for _, s := range l.Steps {
		if s.Data != nil {
			types[CommandType(s.Data[0])]++
		}
	}
	for _, ct := range []CommandType{CmdSetFeatures, CmdApplyPolicies, CmdDeletePolicy, CmdLeaseBatch, CmdExpire, CmdACL, CmdWindowClock} {
		if types[ct] == 0 {
			t.Errorf("no %s entry", ct)
		}
	}
}
