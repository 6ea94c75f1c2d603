package lease

// The routing rule the client's remote decisions share with their model
// (docs/design.md §3.4, "Remote decisions by default"): when a lease is
// too thin to decide a key at its replica.

// ThinCap says whether a lease's cap is too thin for its holder to decide
// a key at its replica, given the key's largest recent cost (floor, at
// least one token): starved, below one cost (it admits nothing); thin,
// under two costs. A seat that cannot bank a second cost wastes its share
// whatever the demand: below the rate, the seat idles; above it, each
// call that finds the bucket empty is refused while the refill waits for
// the next (Poisson calls at 1.6/s on a one-token cap refilled at 1/s use
// about 62% of the share: 1/(1 + 1/1.6)). One holder of the key's whole
// budget, deciding every replica's calls, banks the variance instead
// (docs/design.md §3.4, "Remote decisions by default"). The client's
// routing and its model (remote_sim_test.go) both ask this.
func ThinCap(capMilli, floorMilli int64) (thin, starved bool) {
	floorMilli = max(floorMilli, MilliPerToken)
	return capMilli < satMul(2, floorMilli), capMilli < floorMilli
}
