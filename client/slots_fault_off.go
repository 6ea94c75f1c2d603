//go:build !ration_faults

package client

import "github.com/ration-dev/ration/lease"

// withSlotClientFault is the identity in a normal build (see slots_fault_on.go).
func withSlotClientFault(sc *lease.SlotClient) *lease.SlotClient { return sc }
