package policy

import (
	"slices"
	"strings"
)

// The policy file's schema: the tables below are the only list of the
// fields the file accepts. The walk (parse.go) checks every mapping's keys
// against them, error messages list and suggest fields from them, and the
// encoder writes its keys with the same names.

// Field names.
const (
	fPolicies = "policies"

	fName      = "name"
	fAlgorithm = "algorithm"
	fCharge    = "charge"
	fKey       = "key"
	fRate      = "rate"
	fBurst     = "burst"
	fStart     = "start"
	fLimit     = "limit"
	fWindow    = "window"
	fPeriod    = "period"
	fTimezone  = "timezone"

	fMaxDuration = "max_duration"
	fCancelGrace = "cancel_grace"

	fLease           = "lease"
	fWeights         = "weights"
	fFailure         = "failure"
	fFallbackRate    = "fallback_rate"
	fShadow          = "shadow"
	fMaxKeys         = "max_keys"
	fMaxLeasesPerKey = "max_leases_per_key"
	fMaxKeysPerValue = "max_keys_per_value"
	fMaxDebt         = "max_debt"

	// Fields of the lease and weights mappings, as written there ...
	lDuration   = "duration"
	lRenewAfter = "renew_after"
	lDriftPPM   = "drift_ppm"
	wDefault    = "default"
	wClients    = "clients" // client IDs are free-form: not checked against a table
	// ... and by their dotted names, as errors name them.
	fLeaseDuration   = fLease + "." + lDuration
	fLeaseRenewAfter = fLease + "." + lRenewAfter
	fLeaseDriftPPM   = fLease + "." + lDriftPPM
	fWeightsDefault  = fWeights + "." + wDefault
	fWeightsClients  = fWeights + "." + wClients
	// wantClientWeight is the key in want for every weights.clients.<id>.
	wantClientWeight = fWeightsClients + ".<id>"
)

// fieldSpec is one entry of a mapping's table.
type fieldSpec struct {
	name string
	// want is what a valid value looks like, for error messages.
	want string
	// algs lists the algorithms a policy field applies to; nil means
	// every algorithm.
	algs []Algorithm
	// required: every algorithm in algs needs the field.
	required bool
}

var (
	tokenBucketOnly  = []Algorithm{TokenBucket}
	windowAlgorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingWindowApprox}
	fixedWindowOnly  = []Algorithm{FixedWindow}
	limitAlgorithms  = []Algorithm{FixedWindow, SlidingWindow, SlidingWindowApprox, Concurrency}
	concurrencyOnly  = []Algorithm{Concurrency}
	debtAlgorithms   = []Algorithm{TokenBucket, FixedWindow}
)

// topFields are the fields of the file's top-level mapping.
var topFields = []fieldSpec{
	{name: fPolicies, want: "want a list of policies, each a mapping with name and algorithm"},
}

// policyFields are the fields of a policy, in the order errors list them
// (and the walk checks them).
var policyFields = []fieldSpec{
	{name: fName, want: "want lower-case letters, digits, '_', '.' or '-', starting with a letter or digit, at most 63 characters, like per-tenant"},
	{name: fAlgorithm, want: "want one of token-bucket, fixed-window, sliding-window, sliding-window-approx, concurrency"},
	{name: fCharge, want: "want requests (every request costs 1) or cost (a request costs its cost)"},
	{name: fKey, want: "want a list of trace attribute names like [tenant] or [tenant, route]"},
	{name: fRate, algs: tokenBucketOnly, required: true, want: "want tokens per second like 10 or 0.5, or tokens per interval like 1/m, 100/h, 5/s or 3/30s"},
	{name: fBurst, algs: tokenBucketOnly, required: true, want: "want a number of tokens like 10 or 2.5"},
	{name: fStart, algs: tokenBucketOnly, want: "want full or empty"},
	{name: fLimit, algs: limitAlgorithms, required: true, want: "want a whole number of units per window like 100 (for concurrency: of requests in flight at once, 0 to 1073741824)"},
	// window is required unless period is set (parse.go, validate.go).
	{name: fWindow, algs: windowAlgorithms, want: "want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d"},
	{name: fPeriod, algs: fixedWindowOnly, want: "want day, week (ISO weeks, from Monday 00:00) or month, aligned to the calendar in timezone, instead of window"},
	{name: fTimezone, algs: fixedWindowOnly, want: "want an IANA time zone name like UTC (the default) or Europe/Paris, with period"},
	{name: fMaxDuration, algs: concurrencyOnly, want: "want a Go duration of at least 1ms, shorter than the slot lease's usable span (about 4.99s), like 2s: the longest a request may hold its slot"},
	{name: fCancelGrace, algs: concurrencyOnly, want: "want a Go duration >= 0 shorter than the slot lease's usable span (about 4.99s), like 200ms, without max_duration: requests are cancelled this long before their slot lease ends"},

	// Cluster settings.
	{name: fLease, algs: tokenBucketOnly, want: "want a mapping of duration, renew_after and drift_ppm, like {duration: 5s, renew_after: 1500ms, drift_ppm: 1000}"},
	{name: fWeights, algs: tokenBucketOnly, want: "want a mapping of default and clients, like {default: 1, clients: {replica-a: 2}}"},
	{name: fFailure, algs: tokenBucketOnly, want: "want fail-closed (the default) or fail-open"},
	{name: fFallbackRate, algs: tokenBucketOnly, want: "want tokens per second per replica like 5 or 0.5, at most rate, set exactly when failure is fail-open"},
	{name: fShadow, want: "want true or false"},
	{name: fMaxKeys, want: "want a whole number from 1 to 1000000, like 10000 (the default)"},
	{name: fMaxLeasesPerKey, want: "want a whole number from 1 to 65536, like 1024 (the default)"},
	{name: fMaxKeysPerValue, algs: tokenBucketOnly, want: "want a whole number from 1 to 1000000, like 1000: the most keys sharing one value of the first key attribute (the default is max_keys/10; max_keys or more: no cap)"},
	{name: fMaxDebt, algs: debtAlgorithms, want: "want a number of tokens like 5000 or 2.5: how far below zero charges after the work (Charge, a reservation's Settle) may take the key's buckets (a fixed window's chunks) in all (the default 0: never below zero)"},
}

// sectionFields are the fields of the mappings nested in a policy, by the
// policy field that holds them.
var sectionFields = map[string][]fieldSpec{
	fLease: {
		{name: lDuration, want: "want a Go duration from 100ms to 24h, like 5s (the default)"},
		{name: lRenewAfter, want: "want a Go duration of at least 10ms and less than the usable span duration*(1-drift)/(1+drift), like 1500ms (the default is duration/3)"},
		{name: lDriftPPM, want: "want a whole number of parts per million from 0 to 100000, like 1000 (the default)"},
	},
	fWeights: {
		{name: wDefault, want: "want a whole number from 1 to 1048576, like 1 (the default)"},
		{name: wClients, want: "want a mapping of client ID (1 to 256 bytes) to weight, like {replica-a: 2}"},
	},
}

// Views of the tables.
var (
	topFieldNames    = fieldNames(topFields)
	policyFieldNames = fieldNames(policyFields)
	// sectionFieldNames lists the fields of each nested mapping.
	sectionFieldNames = sectionNames()
	// commonFields apply to every algorithm.
	commonFields = policyFieldsFor("", false)
	// algorithmFields lists the fields each algorithm takes, beyond
	// commonFields; its keys are the known algorithms.
	algorithmFields = perAlgorithm(false)
	// requiredFields lists the fields each algorithm cannot do without.
	requiredFields = perAlgorithm(true)
	// want is what a valid value of each field looks like, by its dotted
	// name.
	want = wantTable()
)

func fieldNames(fields []fieldSpec) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.name
	}
	return out
}

// policyFieldsFor lists the policy fields that apply to algorithm alg,
// common ones included (only those when alg is ""), or only the ones it
// requires.
func policyFieldsFor(alg Algorithm, required bool) []string {
	var out []string
	for _, f := range policyFields {
		applies := len(f.algs) == 0
		for _, a := range f.algs {
			applies = applies || a == alg
		}
		if applies && (!required || f.required) {
			out = append(out, f.name)
		}
	}
	return out
}

func sectionNames() map[string][]string {
	m := make(map[string][]string, len(sectionFields))
	for section, fields := range sectionFields {
		m[section] = fieldNames(fields)
	}
	return m
}

// perAlgorithm maps each algorithm to the fields it takes beyond the
// common ones, or to the fields it requires.
func perAlgorithm(required bool) map[Algorithm][]string {
	m := make(map[Algorithm][]string, len(Algorithms))
	for _, a := range Algorithms {
		m[a] = []string{}
		for _, name := range policyFieldsFor(a, required) {
			if !required && slices.Contains(commonFields, name) {
				continue
			}
			m[a] = append(m[a], name)
		}
	}
	return m
}

func wantTable() map[string]string {
	m := map[string]string{wantClientWeight: "want a whole number from 1 to 1048576, like 2"}
	for _, f := range slices.Concat(topFields, policyFields) {
		m[f.name] = f.want
	}
	for section, fields := range sectionFields {
		for _, f := range fields {
			m[section+"."+f.name] = f.want
		}
	}
	return m
}

// wantFor is what a valid value of field looks like.
func wantFor(field string) string {
	if w, ok := want[field]; ok {
		return w
	}
	if strings.HasPrefix(field, fWeightsClients+".") {
		return want[wantClientWeight]
	}
	return ""
}
