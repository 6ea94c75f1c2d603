package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ration-dev/ration/lease"
)

// Validate checks a Policy built in code or from a protobuf (FromProto)
// against the rules Parse applies to a file. It returns nil, or every
// problem joined with errors.Join, each an *Error naming the policy and the
// (dotted) field and wrapping ErrInvalidPolicy. Line is not checked; it is
// used, when set, as the errors' line.
//
// Quantities are checked as stored: unlike Parse, Validate fills in no
// defaults, so a token bucket needs every cluster setting (a zero
// LeaseDurationNanos is an error), and a window policy must leave the
// token-bucket-only settings at their zero values.
func Validate(p Policy) error {
	if errs := validate(p); len(errs) > 0 {
		return joinErrors(errs)
	}
	return nil
}

// validate is Validate's list of problems.
func validate(p Policy) []*Error {
	v := &validation{p: p}
	algKnown := v.common()
	switch {
	case p.Algorithm == TokenBucket:
		v.tokenBucket()
	case p.Algorithm == Concurrency:
		v.errs = append(v.errs, validateConcurrency(p, v.notHere)...)
	case algKnown: // a window algorithm
		v.window()
	}
	v.keyLimits()
	if len(v.errs) == 0 && p.Algorithm != Concurrency {
		if _, err := p.NewLimiter(0); err != nil {
			v.bad("", "rejected by the limiter: %v", err)
		}
	}
	return v.errs
}

// validation collects the problems with one policy, in check order.
type validation struct {
	p    Policy
	errs []*Error
}

// bad records a problem with field.
func (v *validation) bad(field, format string, args ...any) {
	v.errs = append(v.errs, &Error{Line: v.p.Line, PolicyName: v.p.Name, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// notHere records that field is set but does not apply to the algorithm.
func (v *validation) notHere(field string) {
	p := v.p
	v.bad(field, "does not apply to algorithm %s (%s is for %s); %s takes %s",
		p.Algorithm, field, ownerAlgorithms(field), p.Algorithm, strings.Join(algorithmFields[p.Algorithm], ", "))
}

// common checks the fields every algorithm has: name, algorithm, charge
// and key. It reports whether the algorithm is a known one.
func (v *validation) common() (algKnown bool) {
	p := v.p
	if !nameRE.MatchString(p.Name) {
		v.bad(fName, "%q is not a valid name; %s", p.Name, want[fName])
	}
	_, algKnown = algorithmFields[p.Algorithm]
	if !algKnown {
		v.bad(fAlgorithm, "%q is not an algorithm; %s", p.Algorithm, want[fAlgorithm])
	}
	if p.Charge != ChargeRequests && p.Charge != ChargeCost {
		v.bad(fCharge, "%q is not a charge; %s", p.Charge, want[fCharge])
	}
	seen := map[string]bool{}
	for _, k := range p.Key {
		if msg := keyAttrProblem(k, seen); msg != "" {
			v.bad(fKey, "%s", msg)
		}
		seen[k] = true
	}
	return algKnown
}

// tokenBucket checks a token bucket's rate, burst and cluster settings,
// and that no window setting is set.
func (v *validation) tokenBucket() {
	p := v.p
	if p.RateMilliPerSec <= 0 || p.RateMilliPerSec > MaxRate*1000 {
		v.bad(fRate, "%s is outside (0, %d]; %s", FormatUnits(p.RateMilliPerSec), MaxRate, want[fRate])
	}
	if pp := p.RatePeriodNanos; pp != 0 && (pp == int64(time.Second) || pp < int64(time.Second) || pp > int64(24*time.Hour) || pp%int64(time.Second) != 0) {
		v.bad(fRate, "has a rate period of %v, not a whole number of seconds in (1s, 24h] (a rate per second has period 0); %s", time.Duration(pp), want[fRate])
	}
	if p.BurstMilli < 1000 || p.BurstMilli > MaxBurst*1000 {
		v.bad(fBurst, "%s is outside [1, %d]; %s", FormatUnits(p.BurstMilli), MaxBurst, want[fBurst])
	}
	if p.LimitMilli != 0 {
		v.notHere(fLimit)
	}
	if p.WindowNanos != 0 {
		v.notHere(fWindow)
	}
	if p.Period != "" {
		v.notHere(fPeriod)
	}
	if p.Timezone != "" {
		v.notHere(fTimezone)
	}
	v.errs = append(v.errs, validateLease(p)...)
}

// window checks a window policy's limit and window or calendar period,
// and that no setting of another algorithm is set.
func (v *validation) window() {
	p := v.p
	if p.LimitMilli < 1000 || p.LimitMilli > MaxLimit*1000 || p.LimitMilli%1000 != 0 {
		v.bad(fLimit, "%s is not a whole number in [1, %d]; %s", FormatUnits(p.LimitMilli), MaxLimit, want[fLimit])
	}
	v.windowLength()
	for _, f := range []struct {
		name string
		set  bool
	}{
		{fRate, p.RateMilliPerSec != 0},
		{fBurst, p.BurstMilli != 0},
		{fStart, p.StartFull},
		{fLeaseDuration, p.LeaseDurationNanos != 0},
		{fLeaseRenewAfter, p.RenewAfterNanos != 0},
		{fLeaseDriftPPM, p.DriftPPM != 0},
		{fWeightsDefault, p.DefaultWeight != 0},
		{fWeightsClients, len(p.ClientWeights) > 0},
		{fFailure, p.Failure != ""},
		{fFallbackRate, p.FallbackRateMilliPerSec != 0},
		{fMaxDuration, p.MaxDurationNanos != 0},
		{fCancelGrace, p.CancelGraceNanos != 0},
		{fMaxKeysPerValue, p.MaxKeysPerValue != 0},
		{fMaxDebt, p.MaxDebtMilli != 0 && p.Algorithm != FixedWindow},
	} {
		if f.set {
			v.notHere(f.name)
		}
	}
	if p.Algorithm == FixedWindow && (p.MaxDebtMilli < 0 || p.MaxDebtMilli > MaxBurst*lease.MilliPerToken) {
		v.bad(fMaxDebt, "%s is outside [0, %d]; %s", FormatUnits(p.MaxDebtMilli), MaxBurst, want[fMaxDebt])
	}
}

// windowLength checks a window policy's window, or its calendar period
// and time zone: the first problem only.
func (v *validation) windowLength() {
	p := v.p
	switch {
	case p.Algorithm != FixedWindow && p.Period != "":
		v.notHere(fPeriod)
	case p.Algorithm != FixedWindow && p.Timezone != "":
		v.notHere(fTimezone)
	case p.Period != "" && p.WindowNanos != 0:
		v.bad(fPeriod, "is set with window %s; want one of window and period", formatWindow(p.WindowNanos))
	case p.Period != "":
		if p.Period != lease.PeriodDay && p.Period != lease.PeriodWeek && p.Period != lease.PeriodMonth {
			v.bad(fPeriod, "%q is not a period; %s", p.Period, want[fPeriod])
		} else if _, err := p.WindowSpec(); err != nil {
			v.bad(fTimezone, "%q is not a time zone Go's zone database knows; %s", p.Timezone, want[fTimezone])
		}
	case p.Timezone != "":
		v.bad(fTimezone, "applies only with period (window %s is aligned to the Unix epoch, not to a zone); %s", formatWindow(p.WindowNanos), want[fTimezone])
	case p.WindowNanos <= 0:
		v.bad(fWindow, "%s is not positive; %s", time.Duration(p.WindowNanos), want[fWindow])
	case p.WindowNanos > lease.MaxWindowNanos:
		v.bad(fWindow, "%s is longer than the maximum 366d; %s", formatWindow(p.WindowNanos), want[fWindow])
	}
}

// keyLimits checks the per-policy key and lease-count limits.
func (v *validation) keyLimits() {
	p := v.p
	if msg := intRangeProblem(p.MaxKeys, 1, MaxKeysLimit); msg != "" {
		v.bad(fMaxKeys, "%d %s; %s", p.MaxKeys, msg, want[fMaxKeys])
	}
	if msg := intRangeProblem(p.MaxLeasesPerKey, 1, MaxLeasesPerKeyLimit); msg != "" {
		v.bad(fMaxLeasesPerKey, "%d %s; %s", p.MaxLeasesPerKey, msg, want[fMaxLeasesPerKey])
	}
	// 0 is the default (KeysPerValue).
	if msg := intRangeProblem(p.MaxKeysPerValue, 0, MaxKeysLimit); msg != "" {
		v.bad(fMaxKeysPerValue, "%d %s; %s", p.MaxKeysPerValue, msg, want[fMaxKeysPerValue])
	}
	if p.MaxDebtMilli < 0 || p.MaxDebtMilli > MaxBurst*lease.MilliPerToken {
		v.bad(fMaxDebt, "%s is outside [0, %d]; %s", FormatUnits(p.MaxDebtMilli), MaxBurst, want[fMaxDebt])
	}
}

// validateLease checks a token bucket's cluster settings.
func validateLease(p Policy) []*Error {
	var errs []*Error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Line: p.Line, PolicyName: p.Name, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	durOK := true
	if msg := leaseDurationProblem(p.LeaseDurationNanos); msg != "" {
		bad(fLeaseDuration, "%s %s; %s", time.Duration(p.LeaseDurationNanos), msg, want[fLeaseDuration])
		durOK = false
	}
	driftOK := true
	if msg := intRangeProblem(p.DriftPPM, 0, MaxDriftPPM); msg != "" {
		bad(fLeaseDriftPPM, "%d %s; %s", p.DriftPPM, msg, want[fLeaseDriftPPM])
		driftOK = false
	}
	if p.RenewAfterNanos <= 0 {
		bad(fLeaseRenewAfter, "%s is not positive; %s", time.Duration(p.RenewAfterNanos), want[fLeaseRenewAfter])
	} else if durOK && driftOK {
		if msg := renewAfterProblem(p.RenewAfterNanos, p.LeaseDurationNanos, p.DriftPPM); msg != "" {
			bad(fLeaseRenewAfter, "%s %s", time.Duration(p.RenewAfterNanos), msg)
		}
	}

	if msg := intRangeProblem(p.DefaultWeight, 1, MaxWeight); msg != "" {
		bad(fWeightsDefault, "%d %s; %s", p.DefaultWeight, msg, want[fWeightsDefault])
	}
	for _, id := range slices.Sorted(maps.Keys(p.ClientWeights)) {
		field := fWeightsClients + "." + id
		if msg := clientIDProblem(id); msg != "" {
			bad(fWeightsClients, "%s; %s", msg, want[fWeightsClients])
			continue
		}
		w := p.ClientWeights[id]
		if msg := intRangeProblem(w, 1, MaxWeight); msg != "" {
			bad(field, "%d %s; %s", w, msg, wantFor(field))
		}
	}

	switch p.Failure {
	case FailClosed:
		if p.FallbackRateMilliPerSec != 0 {
			bad(fFallbackRate, "applies only with failure: %s (failure is %s); want 0, or failure: %s", FailOpen, p.Failure, FailOpen)
		}
	case FailOpen:
		if msg := fallbackProblem(p.FallbackRateMilliPerSec, p.RateMilliPerSecFloor()); msg != "" {
			bad(fFallbackRate, "%s %s; %s", FormatUnits(p.FallbackRateMilliPerSec), msg, want[fFallbackRate])
		}
	default:
		bad(fFailure, "%q is not a failure mode; %s", p.Failure, want[fFailure])
	}
	return errs
}

// The checks below are shared by Parse and Validate. Each returns "" when
// the value is valid, else a predicate to follow the value.

// keyAttrProblem checks one key attribute name, given those before it.
func keyAttrProblem(name string, seen map[string]bool) string {
	switch {
	case strings.TrimSpace(name) == "":
		return "has an empty attribute name; " + want[fKey]
	case name == AttrAtMs || name == AttrCost:
		return fmt.Sprintf("%q is reserved (at_ms is the request time, cost its cost) and cannot partition a budget; %s", name, want[fKey])
	case seen[name]:
		return fmt.Sprintf("%q is listed twice; want each attribute once", name)
	}
	return ""
}

// intRangeProblem checks lo <= v <= hi.
func intRangeProblem(v, lo, hi int64) string {
	switch {
	case v < lo:
		return fmt.Sprintf("is less than the minimum %d", lo)
	case v > hi:
		return fmt.Sprintf("is more than the maximum %d", hi)
	}
	return ""
}

func leaseDurationProblem(d int64) string {
	switch {
	case d < int64(MinLeaseDuration):
		return "is shorter than the minimum " + formatDuration(int64(MinLeaseDuration))
	case d > int64(MaxLeaseDuration):
		return "is longer than the maximum " + formatDuration(int64(MaxLeaseDuration))
	}
	return ""
}

// renewAfterProblem checks a positive renew_after against the usable span
// of a valid lease duration and drift.
func renewAfterProblem(renew, duration, drift int64) string {
	usable := usableSpan(duration, drift)
	if renew < usable {
		return ""
	}
	return fmt.Sprintf("is not less than the usable span %s of a %s lease with drift_ppm %d (duration*(1-drift)/(1+drift)), so the lease would run out before the renewal; want a duration > 0 and < %s, like %s (the default, duration/%d)",
		formatDuration(usable), formatDuration(duration), drift, formatDuration(usable), formatDuration(defaultRenewAfter(duration)), DefaultRenewDivisor)
}

// fallbackProblem checks a fail-open fallback rate against the rate.
func fallbackProblem(fallback, rate int64) string {
	switch {
	case fallback <= 0:
		return "is not positive (fail-open needs a fallback rate)"
	case fallback > rate:
		return "is more than the policy's rate " + FormatUnits(rate)
	}
	return ""
}

func clientIDProblem(id string) string {
	switch {
	case id == "":
		return "has an empty client ID"
	case len(id) > MaxClientIDLen:
		return fmt.Sprintf("client ID %.20q... is %d bytes, more than %d", id, len(id), MaxClientIDLen)
	case !utf8.ValidString(id):
		return fmt.Sprintf("client ID %q is not valid UTF-8", id)
	}
	return ""
}

// validateConcurrency checks a concurrency policy: a whole limit of
// requests, and its timing rules against the slot lease (lease duration
// DefaultLeaseDuration, drift DefaultDriftPPM; lease.ValidateSlotRules).
func validateConcurrency(p Policy, notHere func(string)) []*Error {
	var errs []*Error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Line: p.Line, PolicyName: p.Name, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if p.LimitMilli < lease.MilliPerToken || p.LimitMilli > lease.MaxSlots*lease.MilliPerToken || p.LimitMilli%lease.MilliPerToken != 0 {
		bad(fLimit, "%s is not a whole number of requests in [1, %d]; %s", FormatUnits(p.LimitMilli), lease.MaxSlots, want[fLimit])
	}
	usable := usableSpan(int64(DefaultLeaseDuration), DefaultDriftPPM)
	switch {
	case p.MaxDurationNanos < 0:
		bad(fMaxDuration, "%s is negative; %s", time.Duration(p.MaxDurationNanos), want[fMaxDuration])
	case p.MaxDurationNanos >= usable:
		bad(fMaxDuration, "%s is not shorter than the slot lease's usable span %s (lease %s, drift_ppm %d), so no request could ever start; %s",
			time.Duration(p.MaxDurationNanos), formatDuration(usable), formatDuration(int64(DefaultLeaseDuration)), DefaultDriftPPM, want[fMaxDuration])
	}
	switch {
	case p.CancelGraceNanos < 0:
		bad(fCancelGrace, "%s is negative; %s", time.Duration(p.CancelGraceNanos), want[fCancelGrace])
	case p.CancelGraceNanos != 0 && p.MaxDurationNanos != 0:
		bad(fCancelGrace, "is set with max_duration %s, which already ends every request within its lease; want one of max_duration and cancel_grace", time.Duration(p.MaxDurationNanos))
	case p.CancelGraceNanos >= usable:
		bad(fCancelGrace, "%s is not shorter than the slot lease's usable span %s, so no request could ever start; %s",
			time.Duration(p.CancelGraceNanos), formatDuration(usable), want[fCancelGrace])
	}
	if len(errs) == 0 {
		if err := lease.ValidateSlotRules(p.SlotClientConfig(), int64(DefaultLeaseDuration)); err != nil {
			bad("", "rejected by the slot rules: %v", err)
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{fRate, p.RateMilliPerSec != 0},
		{fBurst, p.BurstMilli != 0},
		{fStart, p.StartFull},
		{fWindow, p.WindowNanos != 0},
		{fPeriod, p.Period != ""},
		{fTimezone, p.Timezone != ""},
		{fLeaseDuration, p.LeaseDurationNanos != 0},
		{fLeaseRenewAfter, p.RenewAfterNanos != 0},
		{fLeaseDriftPPM, p.DriftPPM != 0},
		{fWeightsDefault, p.DefaultWeight != 0},
		{fWeightsClients, len(p.ClientWeights) > 0},
		{fFailure, p.Failure != ""},
		{fFallbackRate, p.FallbackRateMilliPerSec != 0},
		{fMaxKeysPerValue, p.MaxKeysPerValue != 0},
		{fMaxDebt, p.MaxDebtMilli != 0},
	} {
		if f.set {
			notHere(f.name)
		}
	}
	return errs
}
