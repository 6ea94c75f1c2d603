package lease

import (
	"fmt"
	"math"
	"math/bits"
)

// PPM is parts per million, the unit of clock-rate error ρ.
const PPM = 1_000_000

// MaxDriftPPM bounds ρ: a clock that may run 10% fast or slow is broken, not
// drifting, and the lease arithmetic would waste most of every lease.
const MaxDriftPPM = 100_000

// validateDrift checks a clock-rate error bound in parts per million.
func validateDrift(driftPPM int64) error {
	if driftPPM < 0 || driftPPM > MaxDriftPPM {
		return fmt.Errorf("%w: clock drift %d ppm is outside [0, %d]", ErrInvalidConfig, driftPPM, MaxDriftPPM)
	}
	return nil
}

// ClientUsableNanos is how long, on the client's own monotonic clock, a lease
// granted for ttlNanos may be used, counting from the client's local send
// time of the request that produced it: ttl*(1-ρ)/(1+ρ), rounded down.
//
// Why: the coordinator reclaims at commit+ttl on its clock, and commit happens
// after the client sent. If both clocks run within ±ρ of real time, the
// client's local span L covers at most L/(1-ρ) real time and the coordinator's
// span ttl covers at least ttl/(1+ρ); L = ttl(1-ρ)/(1+ρ) makes the client stop
// no later than the coordinator reclaims.
//
// A drift outside [0, MaxDriftPPM] is treated as MaxDriftPPM, the most
// conservative value, never as a smaller one.
func ClientUsableNanos(ttlNanos, driftPPM int64) int64 {
	if ttlNanos <= 0 {
		return 0
	}
	driftPPM = safeDrift(driftPPM)
	return MulDiv(min(ttlNanos, MaxTTLNanos), PPM-driftPPM, PPM+driftPPM)
}

func safeDrift(driftPPM int64) int64 {
	if driftPPM < 0 || driftPPM > MaxDriftPPM {
		return MaxDriftPPM
	}
	return driftPPM
}

// ClientDeadline is the local monotonic time at which a client must stop
// admitting from a lease: sendNanos + ClientUsableNanos(ttl, ρ).
func ClientDeadline(sendNanos, ttlNanos, driftPPM int64) int64 {
	return satAdd(max(sendNanos, 0), ClientUsableNanos(ttlNanos, driftPPM))
}

// ClientPeriodNanos is the period over which a client's bucket mints its
// share r_i (a rate per periodNanos, 0 meaning one second): the period
// stretched by (1+ρ), rounded up, so that a clock running ρ fast still mints
// no more than r_i per period of real time. The drift factor is applied to
// time, not to the rate, so no share is rounded down: r = 0.016/s split
// three ways mints 5, 5 and 6 milli-tokens per 1.001 s, not 4, 4 and 5 per
// second. The pool mints over the same stretched period.
func ClientPeriodNanos(periodNanos, driftPPM int64) int64 {
	if periodNanos <= 0 {
		periodNanos = NanosPerSecond
	}
	p := PPM + safeDrift(driftPPM)
	// ceil(period·p/PPM) in 128 bits. Never clamped down (that would mint
	// faster): a result too long for a bucket fails its validation.
	hi, lo := bits.Mul64(uint64(periodNanos), uint64(p))
	lo, carry := bits.Add64(lo, PPM-1, 0)
	hi += carry
	q, _ := bits.Div64(hi, lo, PPM)
	return int64(min(q, math.MaxInt64))
}

// clientMintRate is r_i/(1+ρ) per second, rounded down: a safe mint rate
// for a share r_i, which clients used before ClientPeriodNanos. Rounding
// the rate loses up to a milli-token per second per lease (all of a share
// below 1/(1+ρ) milli-tokens per second); clients now keep the rate and
// stretch the period instead.
func clientMintRate(shareMilliPerSec, driftPPM int64) int64 {
	return MulDiv(shareMilliPerSec, PPM, PPM+safeDrift(driftPPM))
}
