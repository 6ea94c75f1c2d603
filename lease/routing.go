package lease

// The routing rule the client's remote decisions share with their model
// (docs/design.md §3.4, "Remote decisions by default"): when a lease is
// too thin to decide a key at its replica.

// ThinSeat says whether a lease is too thin for its holder to decide a
// key at its replica, given its cap, the key's largest recent cost
// (floor, at least one token) and whether the key is contended
// (Grant.contended, Ledger.Contended): starved, below one cost (it admits
// nothing); thin, under two costs, or any seat of a contended key. A seat
// that cannot bank a second cost wastes its share whatever the demand:
// below the rate, the seat idles; above it, each call that finds the
// bucket empty is refused while the refill waits for the next (Poisson
// calls at 1.6/s on a one-token cap refilled at 1/s use about 62% of the
// share: 1/(1 + 1/1.6)). On a contended key a larger seat wastes the
// same way, what it leaves unused going to nobody. One holder of the
// key's whole budget, deciding every replica's calls, banks the variance
// instead (docs/design.md §3.4, "Remote decisions by default"). The
// client's routing asks this only of a key whose demand at the replica is
// below its promotion rate (a trickle); it and its model
// (remote_sim_test.go) both ask it.
func ThinSeat(capMilli, floorMilli int64, contended bool) (thin, starved bool) {
	floorMilli = max(floorMilli, MilliPerToken)
	return contended || capMilli < satMul(2, floorMilli), capMilli < floorMilli
}

// Contended reports whether the key's holders together ask for more than
// its rate: the sum of their measured demands (as their last grants or
// renewals reported them, each clipped to r) is above r. A holder whose
// demand is still unknown (a first grant asks for all that is fair, the
// client's sentinel) is left out: every newcomer would otherwise make a
// key contended until its first renewal. Every share of a contended key
// is then used or wanted by someone: a seat whose holder's demand is a
// trickle wastes what it leaves unused below its rate, and what its small
// bucket refuses above it, while the key's other callers are refused
// (docs/design.md §3.4, "A contended key"). A client routing by default
// sends such a key remote (ThinSeat).
func (l *Ledger) Contended() bool {
	r := l.s.Config.RateMilliPerSec
	if ix := &l.ix; ix.ok && ix.sumsExact {
		// An unknown demand is at least r (unknownDemand, per second or
		// per period), so the sorted sum holds r for each.
		return ix.rateDiv.sum-int64(ix.nUnknown)*r > r
	}
	return l.contendedScan()
}

// contendedScan is Contended from the leases themselves (no index).
func (l *Ledger) contendedScan() bool {
	r := l.s.Config.RateMilliPerSec
	var sum int64
	for j := range l.s.Leases {
		if unmeasured(&l.s.Leases[j]) {
			continue
		}
		sum += min(max(l.shareClaim(j).RateMilliPerSec, 0), r)
		if sum > r {
			return true
		}
	}
	return false
}

// unmeasured says whether lease le's demand is the sentinel of a
// holder that has not measured it yet (unknownDemand or more).
func unmeasured(le *Lease) bool { return le.DemandRateMilliPerSec >= unknownDemand }
