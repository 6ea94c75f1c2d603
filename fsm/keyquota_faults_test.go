//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestKeyQuotaFaultNegativeControl: the key-quota property against a
// build with faults.KeyQuotaIgnored on (what rationd -fault
// key-quota-ignored runs) must be caught: the fault reaches the state
// machine through New, as on a server.
func TestKeyQuotaFaultNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.KeyQuotaIgnored)
	setRapidFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "faults.KeyQuotaIgnored", "key quota broken", func(rt *rapid.T) {
		runKeyQuota(rt, t, faultNone)
	})
}

// TestCollectOwingNegativeControl: collecting, before a refusal, keys
// whose buckets are not full again (a new key there would start full:
// tokens minted twice) must be caught.
func TestCollectOwingNegativeControl(t *testing.T) {
	setRapidFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a collection of keys that owe tokens", "whose bucket is not full again", func(rt *rapid.T) {
		runKeyQuota(rt, t, faultCollectOwing)
	})
}

// TestKeyQuotaNegativeControl: the rule before key quotas (a new key
// refused only at max_keys) must be caught.
func TestKeyQuotaNegativeControl(t *testing.T) {
	setRapidFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a state machine without key quotas", "key quota broken", func(rt *rapid.T) {
		runKeyQuota(rt, t, faultKeyQuotaIgnored)
	})
}
