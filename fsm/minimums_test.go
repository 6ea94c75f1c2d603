package fsm

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// TestStoredPolicyUnderMinimumsRestores: the duration minimums
// (policy.MinWindow, MinLeasedWindow, MinMaxDuration, MinRenewAfter) are
// checked when a policy is applied, not when it is stored: a log entry or
// snapshot holding a 1 ns window, max_duration or renew_after, written
// before the minimums existed, still applies and restores.
func TestStoredPolicyUnderMinimumsRestores(t *testing.T) {
	h := newHarness(t)
	h.apply(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: KnownFeatures, WallUnixNanos: wallAtSwitch})
	stored := []policy.Policy{
		{Name: "w", Algorithm: policy.FixedWindow, Charge: policy.ChargeRequests, LimitMilli: 1000, WindowNanos: 1, MaxKeys: 1, MaxLeasesPerKey: 1},
		{Name: "c", Algorithm: policy.Concurrency, Charge: policy.ChargeRequests, LimitMilli: 1000, MaxDurationNanos: 1, MaxKeys: 1, MaxLeasesPerKey: 1},
		{Name: "b", Algorithm: policy.TokenBucket, Charge: policy.ChargeRequests, RateMilliPerSec: 1000, BurstMilli: 1000,
			LeaseDurationNanos: sec, RenewAfterNanos: 1, DefaultWeight: 1, Failure: policy.FailClosed, MaxKeys: 1, MaxLeasesPerKey: 1},
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range stored {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, 2*sec, cmd); r.Err != nil {
		t.Fatalf("applying the stored policies: %v", r.Err)
	}
	restored := New(nil)
	if err := restored.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	for _, p := range stored {
		if _, ok := restored.Policy(p.Name); !ok {
			t.Errorf("policy %q lost in the restore", p.Name)
		}
	}
}
