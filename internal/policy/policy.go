package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/lease"
)

// ErrInvalidPolicy is wrapped by every validation error Parse returns.
var ErrInvalidPolicy = errors.New("invalid policy")

// Algorithm names a limiter algorithm. The values are the spellings used in
// the policy file.
type Algorithm string

// The supported algorithms.
const (
	TokenBucket         Algorithm = "token-bucket"
	FixedWindow         Algorithm = "fixed-window"
	SlidingWindow       Algorithm = "sliding-window"
	SlidingWindowApprox Algorithm = "sliding-window-approx"
	// Concurrency bounds the requests in flight at once across the
	// cluster (docs/concurrency.md): limit whole requests, leased as slots.
	Concurrency Algorithm = "concurrency"
)

// Algorithms lists every supported algorithm in documentation order.
var Algorithms = []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowApprox, Concurrency}

// IsWindow reports whether a is one of the window algorithms.
func (a Algorithm) IsWindow() bool {
	return a == FixedWindow || a == SlidingWindow || a == SlidingWindowApprox
}

// Charge says what a request costs.
type Charge string

// The supported charges.
const (
	// ChargeRequests: every request costs one unit.
	ChargeRequests Charge = "requests"
	// ChargeCost: a request costs the value of its cost attribute.
	ChargeCost Charge = "cost"
)

// Reserved attribute names: trace columns with a meaning of their own, which
// therefore cannot partition a budget.
const (
	AttrAtMs = "at_ms"
	AttrCost = "cost"
)

// Limits on parameters, in the units of the file.
const (
	// MaxRate is the largest token-bucket rate, in tokens per second.
	MaxRate = lease.MaxRateMilliPerSec / lease.MilliPerToken
	// MaxBurst is the largest token-bucket burst, in tokens.
	MaxBurst = lease.MaxCapacityMilli / lease.MilliPerToken
	// MaxLimit is the largest window limit, in units per window.
	MaxLimit = lease.MaxCapacityMilli / lease.MilliPerToken
	// MaxNameLen is the longest policy name.
	MaxNameLen = limits.PolicyNameBytes
)

// Shortest durations a policy file may set. They are rules for new
// policies (Parse, and Leasable for MinLeasedWindow), not for stored ones:
// Validate, which checks policies read back from the log and from
// snapshots, does not apply them, so a policy stored before they existed
// still restores.
const (
	// MinWindow is the shortest window: rationctl simulate counts time in
	// whole milliseconds (a trace's at_ms), so a shorter window could not
	// be told from none. The cluster leases windows of MinLeasedWindow or
	// longer only.
	MinWindow = time.Millisecond
	// MinMaxDuration is the shortest max_duration: a request's context
	// ends max_duration after it starts, so a shorter one would end every
	// request before it could do any work.
	MinMaxDuration = time.Millisecond
	// MinRenewAfter is the shortest lease.renew_after: clients renew no
	// more often than this whatever the cluster answers (the client's
	// minRenewAfter), so a shorter setting would not be what happens.
	MinRenewAfter = 10 * time.Millisecond
)

// File is a parsed, validated policy file.
type File struct {
	Policies []Policy
}

// Policy is one validated policy. Quantities are exact integers: milli-units
// and nanoseconds.
type Policy struct {
	// Name is unique within the file.
	Name      string
	Algorithm Algorithm

	// Token bucket only. The rate is RateMilliPerSec milli-units per
	// second, or per RatePeriodNanos when that is set (rate: 1/m is 1000
	// per 60 s, exactly).
	RateMilliPerSec int64
	RatePeriodNanos int64
	BurstMilli      int64
	StartFull       bool // default true; false for the window algorithms

	// Window algorithms only. A fixed window has either WindowNanos
	// (windows aligned to multiples of it from the Unix epoch) or Period
	// (day, week or month in Timezone, "" meaning UTC).
	LimitMilli  int64
	WindowNanos int64
	Period      string
	Timezone    string

	// Concurrency only (LimitMilli is then N·1000, N whole requests).
	// MaxDurationNanos is M: a request starts only if it can end within
	// its holder's lease, and its context ends M after its start (0: no
	// M). CancelGraceNanos (without M): running requests' contexts are
	// cancelled this long before the holder's lease deadline.
	MaxDurationNanos int64
	CancelGraceNanos int64

	Charge Charge
	// Key lists the attributes whose values partition the budget: one
	// limiter per distinct tuple of values. Empty means one shared budget.
	Key []string

	// Cluster settings, token bucket only (zero for the window algorithms,
	// which the cluster does not lease). Parse fills in the defaults.
	//
	// LeaseDurationNanos is the lease duration D (DefaultLeaseDuration).
	LeaseDurationNanos int64
	// RenewAfterNanos is when a client renews, counted from its send time
	// (LeaseDurationNanos/DefaultRenewDivisor).
	RenewAfterNanos int64
	// DriftPPM is ρ, the maximum clock-rate error (DefaultDriftPPM).
	DriftPPM int64
	// DefaultWeight is the fair-share weight of a client not in
	// ClientWeights (DefaultClientWeight).
	DefaultWeight int64
	// ClientWeights holds fair-share weights by client ID; nil when none.
	ClientWeights map[string]int64
	// Failure is what a replica does when the cluster is unreachable
	// (FailClosed).
	Failure FailureMode
	// FallbackRateMilliPerSec is the per-replica rate when Failure is
	// FailOpen and the cluster is unreachable; 0 otherwise.
	FallbackRateMilliPerSec int64

	// Cluster settings for every algorithm.
	//
	// Shadow: decisions are computed and reported but never reject.
	Shadow bool
	// MaxKeys bounds the distinct key values the cluster tracks for the
	// policy (DefaultMaxKeys).
	MaxKeys int64
	// MaxLeasesPerKey bounds the live leases of one key
	// (DefaultMaxLeasesPerKey).
	MaxLeasesPerKey int64
	// MaxKeysPerValue (token buckets) bounds the keys sharing one value of
	// the first key attribute; 0 is the default (see KeysPerValue).
	MaxKeysPerValue int64
	// MaxDebtMilli (token buckets) is the key's debt bound D_max: charges
	// after the work may take its buckets below zero by at most this much
	// in all (docs/design.md §4.1); 0, the default, never below zero.
	MaxDebtMilli int64

	// Line is the policy's line in the file (0 when not parsed from a file).
	Line int
}

// NewLimiter builds the lease limiter that enforces p, with its clock (for a
// token bucket) starting at startNanos. Windows are aligned to multiples of
// the window from time 0 whatever startNanos is.
func (p Policy) NewLimiter(startNanos int64) (lease.Limiter, error) {
	switch p.Algorithm {
	case TokenBucket:
		return lease.NewTokenBucket(lease.BucketConfig{
			CapacityMilli:   p.BurstMilli,
			RateMilliPerSec: p.RateMilliPerSec,
			PeriodNanos:     p.RatePeriodNanos,
			StartFull:       p.StartFull,
		}, startNanos)
	case FixedWindow:
		if p.Period != "" {
			spec, err := p.WindowSpec()
			if err != nil {
				return nil, err
			}
			return lease.NewCalendarWindow(p.LimitMilli, spec)
		}
		return lease.NewFixedWindow(p.windowConfig())
	case SlidingWindow:
		return lease.NewSlidingWindow(p.windowConfig())
	case SlidingWindowApprox:
		return lease.NewApproxSlidingWindow(p.windowConfig())
	case Concurrency:
		return nil, fmt.Errorf("%w: policy %q: a concurrency limit bounds requests in flight, not a rate: simulate does not replay it", ErrInvalidPolicy, p.Name)
	}
	return nil, fmt.Errorf("%w: policy %q: unknown algorithm %q", ErrInvalidPolicy, p.Name, p.Algorithm)
}

// RateMilliPerSecFloor returns the rate per second, rounded down (exact for
// a rate per second).
func (p Policy) RateMilliPerSecFloor() int64 {
	if p.RatePeriodNanos == 0 {
		return p.RateMilliPerSec
	}
	return lease.MulDiv(p.RateMilliPerSec, lease.NanosPerSecond, p.RatePeriodNanos)
}

// RateMilliPerSecCeil returns the rate per second, rounded up: for
// checking admissions against B + r·W (exact for a rate per second).
func (p Policy) RateMilliPerSecCeil() int64 {
	if p.RatePeriodNanos == 0 {
		return p.RateMilliPerSec
	}
	return lease.MulDiv(p.RateMilliPerSec, lease.NanosPerSecond, p.RatePeriodNanos) +
		min(1, lease.MulDiv(p.RateMilliPerSec, lease.NanosPerSecond, 1)%p.RatePeriodNanos)
}

// WindowSpec is a fixed-window policy's windows (lease.NewWindowSpec's
// errors for a bad one).
func (p Policy) WindowSpec() (lease.WindowSpec, error) {
	if p.Period != "" {
		return lease.NewWindowSpec(0, p.Period, p.Timezone)
	}
	return lease.NewWindowSpec(p.WindowNanos, "", p.Timezone)
}

func (p Policy) windowConfig() lease.WindowConfig {
	return lease.WindowConfig{LimitMilli: p.LimitMilli, WindowNanos: p.WindowNanos}
}

// CostMilli is what a request whose trace cost is traceCost (a whole number
// of units, >= 1) costs under p, in milli-units: 1000 when p charges
// requests, traceCost*1000 when it charges cost.
func (p Policy) CostMilli(traceCost int64) int64 {
	if p.Charge == ChargeCost {
		return traceCost * lease.MilliPerToken
	}
	return lease.MilliPerToken
}
