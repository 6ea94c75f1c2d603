package policy

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// clusterFields reads a policy's cluster settings into pol, after the
// limiter fields: defaults first, then the fields present. get finds any
// field; present finds one that applies to the algorithm (reporting one
// that does not).
func (p *parser) clusterFields(id *Error, pol *Policy, algKnown, rateOK bool,
	get, present func(string) (keyVal, bool)) {
	pol.applyDefaults()

	if kv, ok := present(fLease); ok {
		p.lease(id, kv, pol)
	}
	if pol.Algorithm == TokenBucket && pol.RenewAfterNanos == 0 {
		pol.RenewAfterNanos = defaultRenewAfter(pol.LeaseDurationNanos)
	}
	if kv, ok := present(fWeights); ok {
		p.weights(id, kv, pol)
	}

	// failure and fallback_rate: a fallback rate exactly when fail-open.
	failureKV, hasFailure := present(fFailure)
	failureOK := true
	if hasFailure {
		failureOK = false
		if s, ok := p.scalar(id, failureKV, fFailure); ok {
			switch FailureMode(s) {
			case FailClosed, FailOpen:
				pol.Failure = FailureMode(s)
				failureOK = true
			default:
				p.add(p.errAt(id, failureKV, fFailure, fmt.Sprintf("%q is not a failure mode; %s", s, want[fFailure])))
			}
		}
	}
	crossCheck := algKnown && failureOK // pol.Algorithm is then a token bucket
	if kv, ok := present(fFallbackRate); ok {
		v, ok := p.decimal(id, kv, fFallbackRate, MaxRate, false)
		pol.FallbackRateMilliPerSec = v
		switch {
		case !ok || !crossCheck:
		case pol.Failure != FailOpen:
			p.add(p.errAt(id, kv, fFallbackRate, fmt.Sprintf("applies only with failure: %s (failure is %s here); want no fallback_rate, or failure: %s",
				FailOpen, pol.Failure, FailOpen)))
		case rateOK && v > pol.RateMilliPerSecFloor():
			p.add(p.errAt(id, kv, fFallbackRate, fmt.Sprintf("%q is more than the policy's rate %s; %s",
				deref(kv.val).Value, FormatUnits(pol.RateMilliPerSecFloor()), want[fFallbackRate])))
		}
	} else if crossCheck && pol.Failure == FailOpen {
		p.add(p.errAt(id, failureKV, fFallbackRate, "is required with failure: fail-open (the rate each replica admits at while the cluster is unreachable); "+want[fFallbackRate]))
	}

	// Settings for every algorithm.
	if kv, found := get(fShadow); found {
		if s, ok := p.scalar(id, kv, fShadow); ok {
			switch s {
			case "true", "True", "TRUE":
				pol.Shadow = true
			case "false", "False", "FALSE":
				pol.Shadow = false
			default:
				p.add(p.errAt(id, kv, fShadow, fmt.Sprintf("%q is not a boolean; %s", s, want[fShadow])))
			}
		}
	}
	if kv, found := get(fMaxKeys); found {
		if v, ok := p.integer(id, kv, fMaxKeys, 1, MaxKeysLimit); ok {
			pol.MaxKeys = v
		}
	}
	if kv, found := get(fMaxLeasesPerKey); found {
		if v, ok := p.integer(id, kv, fMaxLeasesPerKey, 1, MaxLeasesPerKeyLimit); ok {
			pol.MaxLeasesPerKey = v
		}
	}
	if kv, found := get(fMaxDebt); found {
		if v, ok := p.decimal(id, kv, fMaxDebt, MaxBurst, false); ok {
			pol.MaxDebtMilli = v
		}
	}
	if kv, found := get(fMaxKeysPerValue); found {
		if v, ok := p.integer(id, kv, fMaxKeysPerValue, 1, MaxKeysLimit); ok {
			pol.MaxKeysPerValue = v
		}
	}
}

// lease reads the lease mapping.
func (p *parser) lease(id *Error, kv keyVal, pol *Policy) {
	fields, ok := p.section(id, kv, fLease)
	if !ok {
		return
	}
	durOK, driftOK := true, true
	if f, found := fieldByName(fields, lDuration); found {
		d, s, ok := p.duration(id, f, fLeaseDuration)
		if ok {
			if msg := leaseDurationProblem(d); msg != "" {
				p.add(p.errAt(id, f, fLeaseDuration, fmt.Sprintf("%q %s; %s", s, msg, want[fLeaseDuration])))
				ok = false
			} else {
				pol.LeaseDurationNanos = d
			}
		}
		durOK = ok
	}
	if f, found := fieldByName(fields, lDriftPPM); found {
		v, ok := p.integer(id, f, fLeaseDriftPPM, 0, MaxDriftPPM)
		if ok {
			pol.DriftPPM = v
		}
		driftOK = ok
	}
	if f, found := fieldByName(fields, lRenewAfter); found {
		d, s, ok := p.duration(id, f, fLeaseRenewAfter)
		switch {
		case !ok:
		case d <= 0:
			p.add(p.errAt(id, f, fLeaseRenewAfter, fmt.Sprintf("%q is not positive; %s", s, want[fLeaseRenewAfter])))
		case d < int64(MinRenewAfter):
			p.add(p.errAt(id, f, fLeaseRenewAfter, fmt.Sprintf("%q is shorter than the minimum %s, the shortest interval clients renew at whatever the cluster answers; %s",
				s, formatDuration(int64(MinRenewAfter)), want[fLeaseRenewAfter])))
		case !durOK || !driftOK:
			// Cannot compare with the usable span; those were reported.
		default:
			if msg := renewAfterProblem(d, pol.LeaseDurationNanos, pol.DriftPPM); msg != "" {
				p.add(p.errAt(id, f, fLeaseRenewAfter, fmt.Sprintf("%q %s", s, msg)))
			} else {
				pol.RenewAfterNanos = d
			}
		}
	}
}

// weights reads the weights mapping.
func (p *parser) weights(id *Error, kv keyVal, pol *Policy) {
	fields, ok := p.section(id, kv, fWeights)
	if !ok {
		return
	}
	if f, found := fieldByName(fields, wDefault); found {
		if v, ok := p.integer(id, f, fWeightsDefault, 1, MaxWeight); ok {
			pol.DefaultWeight = v
		}
	}
	f, found := fieldByName(fields, wClients)
	if !found {
		return
	}
	v := deref(f.val)
	switch {
	case isNull(v):
		p.add(p.errAt(id, f, fWeightsClients, "has no value; "+want[fWeightsClients]+" (leave clients out when every client weighs the default)"))
		return
	case v.Kind == yaml.SequenceNode:
		p.add(p.errAt(id, f, fWeightsClients, "is a list; "+want[fWeightsClients]))
		return
	case v.Kind != yaml.MappingNode:
		p.add(p.errAt(id, f, fWeightsClients, fmt.Sprintf("%q is not a mapping; %s", v.Value, want[fWeightsClients])))
		return
	}
	entries := p.fields(v, id, fWeightsClients+".")
	p.noteLines(entries, fWeightsClients+".")
	weights := map[string]int64{}
	for _, e := range entries {
		clientID := e.key.Value
		if isNull(e.key) {
			clientID = ""
		}
		if msg := clientIDProblem(clientID); msg != "" {
			p.add(&Error{Line: e.key.Line, PolicyName: id.PolicyName, PolicyIndex: id.PolicyIndex, Field: fWeightsClients,
				Msg: msg + "; " + want[fWeightsClients]})
			continue
		}
		if w, ok := p.integer(id, e, fWeightsClients+"."+clientID, 1, MaxWeight); ok {
			weights[clientID] = w
		}
	}
	if len(weights) > 0 {
		pol.ClientWeights = weights
	}
}

// section checks that field (lease or weights) holds a mapping and lists
// its entries, reporting unknown ones.
func (p *parser) section(id *Error, kv keyVal, field string) ([]keyVal, bool) {
	v := deref(kv.val)
	switch {
	case isNull(v):
		p.add(p.errAt(id, kv, field, "has no value; "+want[field]+" (leave "+field+" out for the defaults)"))
		return nil, false
	case v.Kind == yaml.SequenceNode:
		p.add(p.errAt(id, kv, field, "is a list; "+want[field]))
		return nil, false
	case v.Kind != yaml.MappingNode:
		p.add(p.errAt(id, kv, field, fmt.Sprintf("%q is not a mapping; %s", v.Value, want[field])))
		return nil, false
	}
	fields := p.fields(v, id, field+".")
	p.unknownFields(fields, sectionFieldNames[field], func(line int, name string) *Error {
		return unknownSectionField(id, line, field, name)
	})
	p.noteLines(fields, field+".")
	return fields, true
}
