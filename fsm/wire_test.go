package fsm

import (
	"slices"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestWireRegistryRefusesDuplicates: registering a number twice in one
// space panics, naming both; the same number in another space, and a
// feature switch of one bit, are accepted; a switch of two bits is not.
func TestWireRegistryRefusesDuplicates(t *testing.T) {
	r := wireRegistry{}
	r.register(wireCommand, 1, "CmdA")
	r.register(wireFrame, 1, "frameA")
	r.register(wireFeature, 1<<3, "FeatureA")
	msg := panicMessage(t, "a duplicate command type", func() { r.register(wireCommand, 1, "CmdB") })
	if !strings.Contains(msg, "CmdA") || !strings.Contains(msg, "CmdB") {
		t.Errorf("duplicate refused as %q", msg)
	}
	mustPanic(t, "a duplicate feature bit", func() { r.register(wireFeature, 1<<3, "FeatureB") })
	mustPanic(t, "a feature of two bits", func() { r.register(wireFeature, 3<<4, "FeatureC") })
}

// TestWireNumbersRegistered: every command type declared in this package
// is registered (a new one left out could share a number unnoticed), and
// the registry holds every feature switch KnownFeatures has.
func TestWireNumbersRegistered(t *testing.T) {
	var names []string
	for _, n := range wireNumbers[wireCommand] {
		names = append(names, n)
	}
	for _, d := range faultstest.Declared(t, "CommandType") {
		if !slices.Contains(names, d) {
			t.Errorf("command type %s is not registered in wire.go", d)
		}
	}
	var all uint64
	for n := range wireNumbers[wireFeature] {
		all |= n
	}
	if all != KnownFeatures {
		t.Errorf("registered feature bits %#x, KnownFeatures %#x", all, KnownFeatures)
	}
	if len(wireNumbers[wireFrame]) != 8 {
		t.Errorf("%d frame kinds registered: %v", len(wireNumbers[wireFrame]), wireNumbers[wireFrame])
	}
}
