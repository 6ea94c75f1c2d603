//go:build ration_faults

package checkreq

import (
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/faults"
)

// expireFault breaks the end of a reservation's hold as
// faults.ReservationExpiryRefunds says: the estimate is refunded, so an
// unsettled reservation is charged nothing (test builds only).
func expireFault(r *client.Reservation) {
	if faults.Active(faults.ReservationExpiryRefunds) {
		_, _ = r.Settle(0)
	}
}
