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
// on typed values);
// Policy.CanonicalKey maps a request's attributes to the policy's key;
// Policy.Weight gives a client's fair-share weight; Policy.Leasable accepts
// what the cluster leases (token buckets, fixed and approximate sliding
// windows, concurrency slots) and rejects the exact sliding window, which
// only simulate runs. Simulate ignores the cluster settings, shadow
// included.
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
// One pass over the YAML. The file is decoded once, into a yaml.Node tree,
// which carries line numbers and the scalar text the value checks need, and
// the walk reads that tree into Policy values. The field tables in
// fields.go (topFields, policyFields, sectionFields) are the only list of
// accepted fields: the walk checks every key of the top-level, policy,
// lease and weights mappings against them, so every misspelt field is
// reported with the policy it is in (and a suggestion) rather than
// silently ignored, and nothing depends on the wording of yaml.v3's
// errors. The walk also reports what a yaml.Node lets through: duplicate
// keys (at every level, weights.clients included), merge keys, and keys
// that are not plain strings. Client IDs, the keys of weights.clients, are
// free-form and checked as IDs. The only yaml.v3 text read is a syntax
// error's "line N:" prefix, for its line (TestSyntaxErrorLine pins it).
//
// Every error, not the first. Validation never stops early: each policy and
// each field is checked and all problems are joined with errors.Join, sorted
// by line, so one edit-run cycle fixes a file. Unknown-field errors come
// after the other problems of their line, in document order.
//
// Parse and Validate. The walk checks each field's text and quotes it in
// errors; Validate checks a typed Policy (one from a protobuf) against the
// same rules, sharing the range checks (intRangeProblem and the like), and
// Parse runs it once, last, on every policy the walk accepts, so nothing
// Parse accepts fails Validate. The walk records each field's line, by its
// dotted name, and Validate's problems are reported on the field's line.
// The walk keeps its own checks because its messages quote the file's text
// ("0.50" rather than 0.5) and Validate's, which FromProto reports, are
// worded for typed values.
//
// Extensibility. The tables in fields.go declare each field once: its name,
// what a valid value looks like (want), the algorithms it applies to (none
// listed: every algorithm) and whether they require it; commonFields,
// algorithmFields, requiredFields and want are views of them. Adding a
// setting takes six edits here: (1) an entry in policyFields (or
// sectionFields, for lease and weights); (2) its decode method on
// policyWalk, called from walkPolicy (or its check in clusterFields);
// (3) its check in a validation method; (4) a field in Policy, with
// its default in applyDefaults; (5) a put in Encode, whose field order is
// the canonical file's, not the table's; (6) ToProto and FromProto, with
// the api.PolicySpec field. TestEncodeWritesOnlyAcceptedFields fails if
// Encode writes a field the tables lack or never writes one they have.
// Unknown fields stay errors, so old binaries reject files that use
// settings they do not understand instead of misapplying them.
package policy
