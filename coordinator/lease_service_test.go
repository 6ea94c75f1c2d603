package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// wantStatus fails unless err is a gRPC status with code and a message
// containing every fragment.
func wantStatus(t *testing.T, what string, err error, code codes.Code, fragments ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, f := range fragments {
		if !strings.Contains(st.Message(), f) {
			t.Errorf("%s: message %q does not contain %q", what, st.Message(), f)
		}
	}
}

// wantKeyError fails unless a per-key result is an error with code and a
// message containing every fragment.
func wantKeyError(t *testing.T, what string, e *api.KeyError, code codes.Code, fragments ...string) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: no per-key error, want %v", what, code)
		return
	}
	if codes.Code(e.GetCode()) != code {
		t.Errorf("%s: per-key %v %q, want %v", what, codes.Code(e.GetCode()), e.GetMessage(), code)
	}
	for _, f := range fragments {
		if !strings.Contains(e.GetMessage(), f) {
			t.Errorf("%s: message %q does not contain %q", what, e.GetMessage(), f)
		}
	}
}

// Test 6: every call a follower gets is forwarded to the leader.
func TestFollowerForwardsToLeader(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	leader := c.WaitForStableLeader(t)
	fi := (c.Index(leader) + 1) % 3
	if c.Server(fi).IsLeader() {
		t.Fatal("picked the leader as the follower")
	}
	ctx := rpcCtx(t)
	lc, ac := c.Client(fi), c.Admin(fi)

	// Calls that commit are retried while Unavailable (the same request:
	// idempotent), as the client library does: a leader that loses its
	// lease on a loaded machine answers "leadership lost while committing".
	applied, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.ApplyPoliciesResponse, error) {
		return ac.ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: `policies:
  - name: forwarded
    algorithm: token-bucket
    rate: 5
    burst: 5
    lease: {duration: 30s}
`})
	})
	if err != nil {
		t.Fatalf("apply policies through a follower: %v", err)
	}
	if len(applied.GetApplied()) != 1 || applied.GetIndex() == 0 {
		t.Fatalf("apply policies: %v", applied)
	}
	if _, ok := leader.FSM().Policy("forwarded"); !ok {
		t.Fatal("the leader does not have the policy applied through a follower")
	}
	info, err := ac.GetPolicy(ctx, &api.GetPolicyRequest{Name: "forwarded"})
	if err != nil || !strings.Contains(info.GetYaml(), "forwarded") {
		t.Fatalf("get policy through a follower: %v %v", info, err)
	}

	k := &api.Key{Policy: "forwarded"}
	acq, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) {
		return lc.Acquire(ctx, acquireReq(caller("fwd", 1, 1), k))
	})
	if err != nil {
		t.Fatalf("acquire through a follower: %v", err)
	}
	g := acq.GetLeases()[0].GetGrant()
	if g == nil || g.GetLeaseId() == 0 || g.GetTtlNanos() <= 0 {
		t.Fatalf("acquire through a follower: %v", acq)
	}
	list, err := ac.ListLeases(ctx, &api.ListLeasesRequest{Policy: "forwarded"})
	if err != nil || len(list.GetLeases()) != 1 || list.GetLeases()[0].GetLeaseId() != g.GetLeaseId() {
		t.Fatalf("list leases through a follower: %v %v", list, err)
	}

	ren, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) {
		return lc.Renew(ctx, &api.RenewRequest{Caller: caller("fwd", 1, 2), Keys: []*api.RenewKey{{Key: k, LeaseId: g.GetLeaseId()}}})
	})
	if err != nil || ren.GetLeases()[0].GetGrant().GetLeaseId() != g.GetLeaseId() {
		t.Fatalf("renew through a follower: %v %v", ren, err)
	}
	rel, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.ReleaseResponse, error) {
		return lc.Release(ctx, &api.ReleaseRequest{Caller: caller("fwd", 1, 3), Keys: []*api.ReleaseKey{{Key: k, LeaseId: g.GetLeaseId(), UnspentMilli: 1000}}})
	})
	if err != nil || rel.GetResults()[0].GetError() != nil {
		t.Fatalf("release through a follower: %v %v", rel, err)
	}
	if got := rel.GetResults()[0].GetCreditedMilli(); got < 0 || got > g.GetCapMilli() {
		t.Errorf("credited %d, want within [0, cap %d]", got, g.GetCapMilli())
	}
	list, err = ac.ListLeases(ctx, &api.ListLeasesRequest{Policy: "forwarded"})
	if err != nil || len(list.GetLeases()) != 0 {
		t.Fatalf("leases after release: %v %v", list, err)
	}
}

// Test 7: retries are idempotent, stale requests are refused, and a new
// incarnation supersedes the old one.
func TestIdempotentRetries(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	fi := (li + 1) % 3
	keys := []*api.Key{key("api", "a"), key("api", "b")}
	// Every call is retried while Unavailable, with its seq, as the
	// client library does: a leader that loses its lease on a loaded
	// machine answers "leadership lost while committing log".
	acquire := func(i int, req *api.AcquireRequest) (*api.LeaseResponse, error) {
		return testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) {
			return c.Client(i).Acquire(ctx, req)
		})
	}

	req := acquireReq(caller("idem", 1, 1), keys...)
	first, err := acquire(li, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := acquire(fi, req) // the retry goes elsewhere
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first, again) {
		t.Fatalf("retry answered differently:\n first %v\n again %v", first, again)
	}
	countLeases := func(client string, inc uint64) int {
		n := 0
		for _, l := range listLeases(t, c, li) {
			if l.GetClientId() == client && (inc == 0 || l.GetIncarnation() == inc) {
				n++
			}
		}
		return n
	}
	if n := countLeases("idem", 0); n != 2 {
		t.Fatalf("%d leases after an acquire and its retry, want 2 (one per key)", n)
	}

	// The same request sent to every server at once (it may share a
	// batch with itself): one answer, one lease per key.
	conc := acquireReq(caller("conc", 1, 1), keys...)
	answers := make([]*api.LeaseResponse, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = acquire(i, conc)
		}()
	}
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("concurrent copy through %s: %v", c.ID(i), errs[i])
		}
		if !proto.Equal(answers[i], answers[0]) {
			t.Errorf("concurrent copies answered differently:\n %v\n %v", answers[i], answers[0])
		}
	}
	if n := countLeases("conc", 0); n != 2 {
		t.Errorf("%d leases after three concurrent copies, want 2", n)
	}

	// seq 2 moves on; seq 1 is now stale, and so is reusing 2 for another call.
	if _, err := acquire(li, acquireReq(caller("idem", 1, 2), keys...)); err != nil {
		t.Fatal(err)
	}
	_, err = acquire(fi, req)
	wantStatus(t, "seq 1 after seq 2", err, codes.Aborted, `client "idem" seq 1 is older than 2`)
	if rpcerr.IsOlderIncarnation(err) || rpcerr.Reason(err) != "STALE" {
		t.Errorf("seq 1 after seq 2: reason %q", rpcerr.Reason(err))
	}
	_, err = testcluster.RetryUnavailable(func(ctx context.Context) (*api.ReleaseResponse, error) {
		return c.Client(li).Release(ctx, &api.ReleaseRequest{Caller: caller("idem", 1, 2), Keys: []*api.ReleaseKey{{Key: keys[0], LeaseId: 1}}})
	})
	wantStatus(t, "seq 2 reused by a release", err, codes.Aborted, "reused seq 2 for a different call")
	if n := countLeases("idem", 0); n != 2 {
		t.Fatalf("%d leases after a second acquire, want 2 (it replaces the first)", n)
	}

	// A new incarnation: the old one's leases go, the old one is stale.
	inc2, err := acquire(fi, acquireReq(caller("idem", 2, 1), keys[0]))
	if err != nil || inc2.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("acquire as incarnation 2: %v %v", inc2, err)
	}
	if n := countLeases("idem", 1); n != 0 {
		t.Errorf("incarnation 1 still holds %d leases after incarnation 2 arrived", n)
	}
	if n := countLeases("idem", 2); n != 1 {
		t.Errorf("incarnation 2 holds %d leases, want 1", n)
	}
	_, err = acquire(li, acquireReq(caller("idem", 1, 3), keys...))
	wantStatus(t, "old incarnation", err, codes.Aborted, `client "idem" incarnation 1 is older than 2`)
	if !rpcerr.IsOlderIncarnation(err) {
		t.Errorf("old incarnation: reason %q, want %s", rpcerr.Reason(err), rpcerr.ReasonOlderIncarnation)
	}
}

// Test 8: bad requests fail with precise codes and messages, and nothing
// invalid reaches the log.
func TestValidationErrors(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.MaxKeysPerRequest = 4 }))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	fi := (li + 1) % 3
	ctx := rpcCtx(t)
	lc := c.Client(fi)

	long := strings.Repeat("x", 257)
	many := make([]*api.Key, 5)
	for i := range many {
		many[i] = key("api", fmt.Sprint(i))
	}
	for _, tc := range []struct {
		name      string
		req       *api.AcquireRequest
		fragments []string
	}{
		{"no caller", &api.AcquireRequest{Keys: acquireReq(nil, key("api", "a")).Keys}, []string{"caller.client_id is required"}},
		{"empty client_id", acquireReq(caller("", 1, 1), key("api", "a")), []string{"caller.client_id is required"}},
		{"client_id too long", acquireReq(caller(long, 1, 1), key("api", "a")), []string{"caller.client_id is 257 bytes, more than 256"}},
		{"seq 0", acquireReq(caller("v", 1, 0), key("api", "a")), []string{"caller.seq must be at least 1"}},
		{"no keys", acquireReq(caller("v", 1, 1)), []string{"the request names no keys"}},
		{"too many keys", acquireReq(caller("v", 1, 1), many...), []string{"5 keys in one request, more than the limit 4"}},
		{"empty policy", acquireReq(caller("v", 1, 1), &api.Key{}), []string{"keys[0].policy is empty"}},
		{"attribute value too long", acquireReq(caller("v", 1, 1), key("api", "a"), key("api", long)), []string{`keys[1] attribute "tenant" is longer than 256 bytes`}},
	} {
		_, err := lc.Acquire(ctx, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.fragments...)
	}
	_, err := lc.Renew(ctx, &api.RenewRequest{Caller: caller("v", 1, 0), Keys: []*api.RenewKey{{Key: key("api", "a"), LeaseId: 1}}})
	wantStatus(t, "renew with seq 0", err, codes.InvalidArgument, "caller.seq must be at least 1")
	_, err = lc.Release(ctx, &api.ReleaseRequest{Caller: caller("v", 1, 1)})
	wantStatus(t, "release without keys", err, codes.InvalidArgument, "the request names no keys")
	// Audit reports no correct client sends (coordinator/audit.go).
	_, err = lc.Renew(ctx, &api.RenewRequest{Caller: caller("v", 1, 5), Keys: []*api.RenewKey{{Key: key("api", "a"), LeaseId: 1, AdmittedMilli: -1, AdmittedSinceSeq: 4}}})
	wantStatus(t, "renew with a negative report", err, codes.InvalidArgument, "keys[0].admitted_milli is negative (-1)")
	_, err = lc.Renew(ctx, &api.RenewRequest{Caller: caller("v", 1, 5), Keys: []*api.RenewKey{{Key: key("api", "a"), LeaseId: 1, AdmittedMilli: 1, AdmittedSinceSeq: 5}}})
	wantStatus(t, "renew reporting from itself", err, codes.InvalidArgument, "keys[0].admitted_since_seq 5 is not before caller.seq 5")
	_, err = lc.Release(ctx, &api.ReleaseRequest{Caller: caller("v", 1, 5), Keys: []*api.ReleaseKey{{Key: key("api", "a"), LeaseId: 1, AdmittedMilli: 1, AdmittedSinceSeq: 9}}})
	wantStatus(t, "release reporting from the future", err, codes.InvalidArgument, "keys[0].admitted_since_seq 9 is not before caller.seq 5")

	// Per-key failures: the RPC succeeds, the key carries the error.
	resp, err := lc.Acquire(ctx, acquireReq(caller("v", 1, 1), key("nope", "a"), &api.Key{Policy: "api"}, key("api", "ok")))
	if err != nil {
		t.Fatalf("acquire with bad keys: %v", err)
	}
	wantKeyError(t, "unknown policy", resp.GetLeases()[0].GetError(), codes.NotFound, `policy "nope"`)
	wantKeyError(t, "missing key attribute", resp.GetLeases()[1].GetError(), codes.InvalidArgument, `keyed on "tenant"`)
	if resp.GetLeases()[2].GetGrant() == nil {
		t.Errorf("the good key next to bad ones: %v", resp.GetLeases()[2])
	}

	// max_keys: "small" tracks at most 2 keys.
	resp, err = lc.Acquire(ctx, acquireReq(caller("v", 1, 2), key("small", "a"), key("small", "b"), key("small", "c")))
	if err != nil {
		t.Fatalf("acquire past max_keys: %v", err)
	}
	if resp.GetLeases()[0].GetGrant() == nil || resp.GetLeases()[1].GetGrant() == nil {
		t.Fatalf("first two keys of small: %v", resp)
	}
	wantKeyError(t, "third key of small", resp.GetLeases()[2].GetError(), codes.ResourceExhausted, `policy "small"`, "max_keys=2")

	// Invalid policy files: InvalidArgument naming the problem, and no
	// log entry. (An unrelated expire entry can land between the two
	// reads of the index, so a changed index is checked again.)
	for _, tc := range []struct {
		name      string
		yaml      string
		fragments []string
	}{
		{"negative rate", "policies:\n  - name: bad\n    algorithm: token-bucket\n    rate: -5\n    burst: 10\n", []string{`policy "bad"`, `field "rate"`}},
		{"unknown field", "policies:\n  - name: bad\n    algorithm: token-bucket\n    rate: 5\n    burst: 10\n    brust: 3\n", []string{`"brust"`}},
		{"not yaml", "policies: [", []string{"line"}},
		{"window algorithm", "policies:\n  - name: win\n    algorithm: sliding-window\n    limit: 10\n    window: 1s\n", []string{`policy "win"`, "sliding-window", "the exact sliding window is for simulate"}},
		{"two window algorithms", "policies:\n  - name: win1\n    algorithm: sliding-window\n    limit: 10\n    window: 1s\n  - name: win2\n    algorithm: sliding-window\n    limit: 10\n    window: 1s\n", []string{"line 2:", `policy "win1"`, "line 6:", `policy "win2"`}},
		{"one bad among good", "policies:\n  - name: good\n    algorithm: token-bucket\n    rate: 5\n    burst: 5\n  - name: bad\n    algorithm: token-bucket\n    rate: 5\n    burst: 0\n", []string{`policy "bad"`, `field "burst"`}},
	} {
		unchanged := false
		for attempt := 0; attempt < 3 && !unchanged; attempt++ {
			before := leader.Raft().LastIndex()
			_, err := c.Admin(fi).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: tc.yaml})
			wantStatus(t, tc.name, err, codes.InvalidArgument, tc.fragments...)
			unchanged = leader.Raft().LastIndex() == before
		}
		if !unchanged {
			t.Errorf("%s: the log grew on every attempt", tc.name)
		}
		for _, name := range []string{"bad", "win", "win1", "win2", "good"} {
			if _, ok := leader.FSM().Policy(name); ok {
				t.Errorf("%s: policy %q was stored", tc.name, name)
			}
		}
	}
}

// Test 9: a lease nobody renews is removed by the leader's expire command
// once its duration has passed, not before.
func TestUnrenewedLeaseExpires(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies+`  - name: brief
    algorithm: token-bucket
    rate: 10
    burst: 10
    lease: {duration: 1s}
`))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	ctx := rpcCtx(t)
	resp, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) { // as the client library would
		return c.Client(li).Acquire(ctx, acquireReq(caller("mortal", 1, 1), &api.Key{Policy: "brief"}, key("api", "stays")))
	})
	if err != nil || resp.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("acquire: %v %v", resp, err)
	}
	expiry := resp.GetClusterTimeNanos() + resp.GetLeases()[0].GetGrant().GetTtlNanos()

	c.WaitFor(t, testcluster.DefaultWait, func() error {
		list, err := c.Admin(li).ListLeases(ctx, &api.ListLeasesRequest{Policy: "brief"})
		if err != nil {
			return err
		}
		if n := len(list.GetLeases()); n > 0 {
			return fmt.Errorf("%d brief leases at cluster time %d, expiry %d", n, list.GetClusterTimeNanos(), expiry)
		}
		if list.GetClusterTimeNanos() < expiry {
			t.Fatalf("lease gone at cluster time %d, before its expiry %d", list.GetClusterTimeNanos(), expiry)
		}
		return nil
	})
	// The 60s lease on the other policy is untouched.
	if n := len(listLeases(t, c, li)); n != 1 {
		t.Errorf("%d leases left, want the one long lease", n)
	}
	c.WaitForConsistentState(t) // followers applied the same expiry
}
