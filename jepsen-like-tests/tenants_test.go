//go:build jepsen && linux

package jepsen

import (
	"testing"
	"time"
)

// tenantsConfig: r = 50 tokens/s and B = 50 per key, keyed [tenant,
// route], max_keys 40 and max_keys_per_value 8. Replicas c1 … c3 are
// tenants t1 … t3, each offering 75 requests/s of cost 1 (1.5× r) on its
// one key for 15s; s1 is tenant acme, offering 500 requests/s over 500
// distinct routes from before they start to the end.
func tenantsConfig(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Replicas = []string{"c1", "c2", "c3", "s1"}
	cfg.RatePerReplica = 75
	cfg.CostMix = "1:1"
	cfg.Policy = PolicySpec{Rate: 50, Burst: 50, Lease: 5 * time.Second, RenewAfter: time.Second,
		Key: "[tenant, route]", MaxKeys: 40, MaxKeysPerValue: 8}
	cfg.Spray = &Spray{Replica: "s1", Rate: 500, Routes: 500, Load: 15 * time.Second}
	return cfg
}

// TestTenantSpray: while acme sprays keys, every other tenant keeps at
// least 90% of its quota, every key keeps B + r·W, and acme never holds
// more than max_keys_per_value keys (docs/security.md#tenant-isolation).
func TestTenantSpray(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := tenantsConfig("tenant-spray", seedFromEnv(41))
	e := newEnv(t, cfg)
	requirePass(t, e, ExecuteTenants(e, ""))
}

// TestTenantSprayNegativeControl: servers built with key-quota-ignored
// refuse a key only at max_keys, so acme fills it and the honest tenants
// are refused theirs: tenant-share must catch it.
func TestTenantSprayNegativeControl(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := tenantsConfig("nc-key-quota-ignored", seedFromEnv(42))
	cfg.ServerFaults = []string{"key-quota-ignored"}
	e := newEnv(t, cfg)
	requireCaughtBy(t, e, ExecuteTenants(e, "max_keys_per_value not enforced"), "tenant-share")
}
