//go:build ration_faults

package observe_test

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
	"github.com/ration-dev/ration/internal/observe"
)

// TestAuditNegativeControl: clients that report twice what they admitted
// (faults.ReportDouble, as clients over-admitting would show) must make
// the audit count windows over the bound, under the same load as
// TestAuditUtilizationUnderLoad.
func TestAuditNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	faultstest.Use(t, faults.ReportDouble)
	r := runAudited(t, auditPolicies, 6*time.Second, nil)
	fams := r.leaderFamilies(t, r.wantReported(2))
	over := mustValue(t, fams, "ration_bound_windows_over_total", "policy=audited")
	u := mustValue(t, fams, "ration_bound_utilization", "policy=audited", "window="+observe.WindowLabel(4*time.Second))
	if over == 0 || u <= 1 {
		t.Fatalf("double reports went unseen: %v windows over, worst 4s utilization %.3f", over, u)
	}
	t.Logf("caught as expected: %v windows over, worst 4s utilization %.3f", over, u)
}
