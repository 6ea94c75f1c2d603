//go:build !ration_faults

package faults

import "testing"

func TestNormalBuildRefusesFaults(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled in a normal build")
	}
	if err := Set(string(AckBeforeCommit)); err == nil {
		t.Fatal("a normal build accepted a fault")
	}
	if err := WatchClock("x", nil, nil, nil); err == nil {
		t.Fatal("a normal build accepted clock control")
	}
}
