//go:build !ration_faults

package checkreq

import "github.com/ration-dev/ration/client"

// expireFault does nothing in a normal build (see fault_on.go).
func expireFault(*client.Reservation) {}
