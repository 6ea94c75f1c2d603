// Package policy reads ration's policy file: the YAML document that names
// each rate-limit policy, its algorithm and parameters, how a request is
// charged, which request attributes partition its budget, and how the
// cluster enforces it (lease settings, fair-share weights, failure mode,
// shadow mode, bounds on state).
//
// A policy file looks like this:
//
//	policies:
//	  - name: per-tenant
//	    algorithm: token-bucket
//	    rate: 10        # tokens per second, up to 3 decimals
//	    burst: 20       # bucket capacity, up to 3 decimals
//	    key: [tenant]
//	  - name: global
//	    algorithm: sliding-window
//	    limit: 1000     # units per window
//	    window: 1m
//	    charge: cost
//	  - name: leased
//	    algorithm: token-bucket
//	    rate: 100
//	    burst: 200
//	    lease: {duration: 5s, renew_after: 1500ms, drift_ppm: 1000}
//	    weights: {default: 1, clients: {replica-a: 2}}
//	    failure: fail-open
//	    fallback_rate: 5
//
// Parse and ParseFile validate the whole file and report every problem at
// once; each error names the file line, the policy, the field (dotted inside
// lease and weights, as in lease.duration) and what would be valid, and
// wraps ErrInvalidPolicy. Parse fills in the defaults of every optional
// setting (DefaultLeaseDuration and the other Default constants). A parsed
// Policy builds the same lease.Limiter that replicas run (Policy.NewLimiter).
//
// For the cluster: Policy.ToProto and FromProto convert to and from
// api.PolicySpec, FromProto re-validating with Validate (the file's rules,
// on typed values); MarshalSpec encodes a spec deterministically;
// Policy.CanonicalKey maps a request's attributes to the policy's key;
// Policy.Weight gives a client's fair-share weight; Policy.Leasable rejects
// the window algorithms, which only simulate runs. Simulate ignores the
// cluster settings, shadow included.
//
// # DESIGN
//
// Units. Every quantity is an exact integer: token counts and window limits
// are milli-units (int64, 1 unit = 1000), windows are nanoseconds. Numbers
// are parsed from the YAML scalar's text by ParseMilli, a decimal parser that
// never goes through float64, so "0.1" is exactly 100 milli-tokens and a rate
// that cannot be represented (more than 3 decimal places) is rejected rather
// than rounded.
//
// Two passes over the YAML. The file is first decoded into a yaml.Node tree,
// which carries line numbers and the scalar text the value checks need. It is
// then decoded a second time with a yaml.Decoder in KnownFields(true) mode
// into rawFile/rawPolicy/rawLease/rawWeights, whose fields are yaml.Node:
// that pass can fail only on unknown field names (and on shapes the walk
// reports itself), so the set of accepted fields is exactly the yaml tags of
// those structs, and every misspelt field is reported (with the policy it is
// in) rather than silently ignored. yaml.v3 skips a mapping with a duplicate
// key in that pass, so for those the walk reports unknown fields itself.
//
// Every error, not the first. Validation never stops early: each policy and
// each field is checked and all problems are joined with errors.Join, sorted
// by line, so one edit-run cycle fixes a file.
//
// Parse and Validate. The walk checks each field's text and quotes it in
// errors; Validate checks a typed Policy (one from a protobuf) against the
// same rules, sharing the range checks, and Parse runs it last on every
// policy it accepts, so nothing Parse accepts fails Validate.
//
// Extensibility. Algorithm-specific fields are declared in algorithmFields;
// fields that apply to every algorithm in commonFields. Adding a setting
// means a field in rawPolicy (or rawLease/rawWeights), an entry in one of
// those tables and in want, a check in walkPolicy (or clusterFields) and in
// validate, a field in Policy, ToProto/FromProto and Encode. Unknown fields
// stay errors, so old binaries reject files that use settings they do not
// understand instead of misapplying them.
package policy
