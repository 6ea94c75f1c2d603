package coordinator

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/protobuf/proto"
)

// FuzzLeaseAPI feeds arbitrary wire bytes to the lease API as the service
// receives them: each is decoded as an Acquire, Renew and Release request,
// checked by validateRequest, and, if that accepts it, applied by a state
// machine as the batcher would propose it. Nothing may panic, and every
// answer is a response or an error (a per-key error with a code, or a
// whole-request one), never both or neither.
func FuzzLeaseAPI(f *testing.F) {
	seeds := []proto.Message{
		&api.AcquireRequest{Caller: &api.Caller{ClientId: "a", Incarnation: 1, Seq: 1},
			Keys: []*api.AcquireKey{{Key: &api.Key{Policy: "p", Attributes: map[string]string{"tenant": "x", "route": "y"}}, Demand: &api.Demand{RateMilliPerSec: -1, BurstMilli: 1 << 62, MaxCostMilli: -5}}}},
		&api.RenewRequest{Caller: &api.Caller{ClientId: "a", Incarnation: 1, Seq: 2},
			Keys: []*api.RenewKey{{Key: &api.Key{Policy: "p", Attributes: map[string]string{"tenant": "x"}}, LeaseId: 1, Demand: &api.Demand{RateMilliPerSec: 9223372036854775807}}}},
		&api.ReleaseRequest{Caller: &api.Caller{ClientId: "a", Incarnation: 1, Seq: 3},
			Keys: []*api.ReleaseKey{{Key: &api.Key{Policy: "p", Attributes: map[string]string{"tenant": "x"}}, LeaseId: 1, UnspentMilli: -9223372036854775808}}},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	file, err := policy.Parse(strings.NewReader(`
policies:
  - name: p
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
`))
	if err != nil {
		f.Fatal(err)
	}
	apply := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		apply.Policies = append(apply.Policies, p.ToProto())
	}
	s := &Server{cfg: DefaultConfig()}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := fsm.New(nil)
		index := uint64(0)
		run := func(ct fsm.CommandType, msg proto.Message) *fsm.Result {
			b, err := fsm.Encode(ct, 1e9, msg)
			if err != nil {
				t.Fatal(err)
			}
			index++
			r, _ := m.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: b}).(*fsm.Result)
			if r == nil {
				t.Fatal("no result")
			}
			return r
		}
		run(fsm.CmdSetFeatures, &api.SetFeaturesCommand{Features: fsm.BaselineFeatures}) // a cluster's first entry
		if r := run(fsm.CmdApplyPolicies, apply); r.Err != nil {
			t.Fatal(r.Err)
		}
		var acq api.AcquireRequest
		if proto.Unmarshal(data, &acq) == nil && s.validateRequest(acq.GetCaller(), keysOf(acq.GetKeys()), len(data)) == nil {
			checkOp(t, run(fsm.CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Acquire{Acquire: &acq}}}}), len(acq.GetKeys()))
		}
		var ren api.RenewRequest
		if proto.Unmarshal(data, &ren) == nil && s.validateRequest(ren.GetCaller(), keysOf(ren.GetKeys()), len(data)) == nil {
			checkOp(t, run(fsm.CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Renew{Renew: &ren}}}}), len(ren.GetKeys()))
		}
		var rel api.ReleaseRequest
		if proto.Unmarshal(data, &rel) == nil && s.validateRequest(rel.GetCaller(), keysOf(rel.GetKeys()), len(data)) == nil {
			checkOp(t, run(fsm.CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Release{Release: &rel}}}}), len(rel.GetKeys()))
		}
	})
}

func checkOp(t *testing.T, r *fsm.Result, keys int) {
	t.Helper()
	if r.Err != nil || len(r.Ops) != 1 {
		t.Fatalf("batch result %+v", r)
	}
	op := r.Ops[0]
	if op.Err != nil {
		return // the whole request refused (e.g. a stale seq)
	}
	switch {
	case op.Lease != nil:
		if len(op.Lease.GetLeases()) != keys {
			t.Fatalf("%d answers for %d keys", len(op.Lease.GetLeases()), keys)
		}
		for _, kl := range op.Lease.GetLeases() {
			if (kl.GetGrant() == nil) == (kl.GetError() == nil) {
				t.Fatalf("answer %v is neither a grant nor an error", kl)
			}
			if e := kl.GetError(); e != nil && (e.GetCode() == 0 || e.GetMessage() == "") {
				t.Fatalf("error without code or message: %v", e)
			}
		}
	case op.Release != nil:
		if len(op.Release.GetResults()) != keys {
			t.Fatalf("%d results for %d keys", len(op.Release.GetResults()), keys)
		}
	default:
		t.Fatal("no answer")
	}
}
