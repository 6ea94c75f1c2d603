//go:build ration_faults

package client

import (
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
)

// withSlotClientFault breaks a new slot client as faults.SlotAckAtOnce or
// faults.SlotInstallExtendsOld says (test builds only).
func withSlotClientFault(sc *lease.SlotClient) *lease.SlotClient {
	switch {
	case faults.Active(faults.SlotAckAtOnce):
		lease.InjectSlotClientFault(sc, lease.SlotClientFaultAckAtOnce)
	case faults.Active(faults.SlotInstallExtendsOld):
		lease.InjectSlotClientFault(sc, lease.SlotClientFaultInstallExtendsOld)
	}
	return sc
}
