package fsm

// Regression tests from the adversarial review of the coordinator: each
// failed on the code as first written.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc/codes"
)

func (h *harness) applyYAML(at int64, yaml string) {
	h.t.Helper()
	file, err := policy.Parse(strings.NewReader(yaml))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, at, cmd); r.Err != nil {
		h.t.Fatal(r.Err)
	}
}

const perTenantV1 = `
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease: {duration: 5s}
`

func grantOf(t *testing.T, ops []OpResult) *api.Grant {
	t.Helper()
	if ops[0].Err != nil {
		t.Fatal(ops[0].Err)
	}
	g := ops[0].Lease.GetLeases()[0].GetGrant()
	if g == nil {
		t.Fatalf("no grant: %v", ops[0].Lease)
	}
	return g
}

// Finding 1: a policy update that changes keying (key list, start_full)
// drops every live ledger. Clients holding leases keep admitting until
// their deadlines, and the fresh ledger grants the whole budget again at
// once: r and B are handed out twice within one lease duration. (Delete
// and re-apply was refused the same way; it now resurrects the retired
// budgets instead: TestDeleteAndReapplyResurrectsLeases.)
func TestReviewPolicyRekeyGrantsCapacityTwice(t *testing.T) {
	cases := map[string]func(h *harness, at int64) *Result{
		"add key attribute": func(h *harness, at int64) *Result {
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "key: [tenant]", "key: [tenant, region]", 1))
		},
		"toggle start_full": func(h *harness, at int64) *Result {
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "burst: 20", "burst: 20\n    start: empty", 1))
		},
		"delete and re-key": func(h *harness, at int64) *Result {
			if r := h.apply(CmdDeletePolicy, at, &api.DeletePolicyCommand{Name: "per-tenant"}); r.Err != nil && !strings.Contains(r.Err.Error(), "not found") {
				t.Fatal(r.Err)
			}
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "key: [tenant]", "key: [region]", 1))
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.applyYAML(0, perTenantV1)
			a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
			// a may admit under these terms until 6 s: fresh budgets now
			// would hand out r and B a second time. The change is refused.
			r := change(h, 2*sec)
			if code(r.Err) != codes.FailedPrecondition || !strings.Contains(r.Err.Error(), "live until") {
				t.Fatalf("change while a's lease (ttl %v) is live: %v, want FailedPrecondition", a.GetTtlNanos(), r.Err)
			}
			// Once the old leases have expired, the change goes through.
			h.apply(CmdExpire, 6*sec, &api.ExpireCommand{})
			if r := change(h, 6*sec+1); r.Err != nil {
				t.Fatalf("change after the old leases expired: %v", r.Err)
			}
		})
	}
}

func (h *harness) applyYAMLResult(at int64, yaml string) *Result {
	h.t.Helper()
	file, err := policy.Parse(strings.NewReader(yaml))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	return h.apply(CmdApplyPolicies, at, cmd)
}

// Finding 2: after a policy update lowers the budget (Reconfigure sets
// OvercommitUntil), any lease operation applied at or after the old leases'
// expiry but before the Expire entry removes them leaves a state that fails
// CheckInvariants. Snapshot -> Restore then fails: a restarted server cannot
// load its snapshot, a lagging follower cannot install it, and rationctl
// snapshot restore refuses it.
func TestReviewSnapshotAfterBudgetCutRestores(t *testing.T) {
	h := newHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))) // expires at 6 s
	h.applyYAML(2*sec, strings.Replace(perTenantV1, "rate: 10", "rate: 5", 1))
	// The leader proposes Expire every ExpireInterval (and a margin late
	// after a leader change); a grant for the key lands first.
	at := sec + a.GetTtlNanos() + 50e6
	h.batch(at, acquire(caller("b", 1, 1), tenant("acme")))
	snap := snapshotBytes(t, h.f)
	if err := New(nil).Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("snapshot of a reachable state does not restore: %v", err)
	}
}
