package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ration-dev/ration/api"
)

// ToProto converts p to the message the cluster stores in its log and
// snapshots. Every setting is written out, defaults included, so the spec
// does not depend on the defaults of the binary that reads it. Line is not
// carried.
func (p Policy) ToProto() *api.PolicySpec {
	spec := &api.PolicySpec{
		Name:                    p.Name,
		Algorithm:               string(p.Algorithm),
		RateMilliPerSec:         p.RateMilliPerSec,
		BurstMilli:              p.BurstMilli,
		StartFull:               p.StartFull,
		LimitMilli:              p.LimitMilli,
		WindowNanos:             p.WindowNanos,
		Period:                  p.Period,
		Timezone:                p.Timezone,
		Charge:                  string(p.Charge),
		Key:                     slices.Clone(p.Key),
		LeaseDurationNanos:      p.LeaseDurationNanos,
		RenewAfterNanos:         p.RenewAfterNanos,
		DriftPpm:                p.DriftPPM,
		DefaultWeight:           p.DefaultWeight,
		FailureMode:             string(p.Failure),
		FallbackRateMilliPerSec: p.FallbackRateMilliPerSec,
		Shadow:                  p.Shadow,
		MaxKeys:                 p.MaxKeys,
		MaxLeasesPerKey:         p.MaxLeasesPerKey,
		MaxKeysPerValue:         p.MaxKeysPerValue,
		MaxDebtMilli:            p.MaxDebtMilli,
		MaxDurationNanos:        p.MaxDurationNanos,
		CancelGraceNanos:        p.CancelGraceNanos,
	}
	if len(p.ClientWeights) > 0 {
		spec.ClientWeights = maps.Clone(p.ClientWeights)
	}
	if p.RatePeriodNanos != 0 {
		spec.RateMilliPerSec = p.RateMilliPerSecFloor()
		spec.RateMilliPerPeriod = p.RateMilliPerSec
		spec.RatePeriodNanos = p.RatePeriodNanos
	}
	return spec
}

// FromProto converts a spec from the log or a snapshot back to a Policy
// and validates it with Validate: a spec that fails (written by a buggy or
// newer binary, or corrupted) is an error wrapping ErrInvalidPolicy, never
// a panic. Values are taken as stored, without defaults. An empty key list
// or client weight map becomes nil; Line is 0.
func FromProto(spec *api.PolicySpec) (Policy, error) {
	if spec == nil {
		return Policy{}, fmt.Errorf("%w: no policy spec (nil)", ErrInvalidPolicy)
	}
	p := Policy{
		Name:                    spec.GetName(),
		Algorithm:               Algorithm(spec.GetAlgorithm()),
		RateMilliPerSec:         spec.GetRateMilliPerSec(),
		BurstMilli:              spec.GetBurstMilli(),
		StartFull:               spec.GetStartFull(),
		LimitMilli:              spec.GetLimitMilli(),
		WindowNanos:             spec.GetWindowNanos(),
		Period:                  spec.GetPeriod(),
		Timezone:                spec.GetTimezone(),
		Charge:                  Charge(spec.GetCharge()),
		LeaseDurationNanos:      spec.GetLeaseDurationNanos(),
		RenewAfterNanos:         spec.GetRenewAfterNanos(),
		DriftPPM:                spec.GetDriftPpm(),
		DefaultWeight:           spec.GetDefaultWeight(),
		Failure:                 FailureMode(spec.GetFailureMode()),
		FallbackRateMilliPerSec: spec.GetFallbackRateMilliPerSec(),
		Shadow:                  spec.GetShadow(),
		MaxKeys:                 spec.GetMaxKeys(),
		MaxLeasesPerKey:         spec.GetMaxLeasesPerKey(),
		MaxKeysPerValue:         spec.GetMaxKeysPerValue(),
		MaxDebtMilli:            spec.GetMaxDebtMilli(),
		MaxDurationNanos:        spec.GetMaxDurationNanos(),
		CancelGraceNanos:        spec.GetCancelGraceNanos(),
	}
	if spec.GetRatePeriodNanos() != 0 {
		p.RateMilliPerSec, p.RatePeriodNanos = spec.GetRateMilliPerPeriod(), spec.GetRatePeriodNanos()
	}
	if len(spec.GetKey()) > 0 {
		p.Key = slices.Clone(spec.GetKey())
	}
	if len(spec.GetClientWeights()) > 0 {
		p.ClientWeights = maps.Clone(spec.GetClientWeights())
	}
	if err := Validate(p); err != nil {
		return Policy{}, err
	}
	return p, nil
}
