// Package policy reads ration's policy file: the YAML document that names
// each rate-limit policy, its algorithm and parameters, how a request is
// charged, and which request attributes partition its budget.
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
//
// Parse and ParseFile validate the whole file and report every problem at
// once; each error names the file line, the policy, the field and what would
// be valid, and wraps ErrInvalidPolicy. A parsed Policy builds the same
// lease.Limiter that replicas run (Policy.NewLimiter).
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
// into rawFile/rawPolicy, whose fields are yaml.Node: that pass can fail only
// on unknown field names, so the set of accepted fields is exactly the yaml
// tags of those two structs, and every misspelt field is reported (with the
// policy it is in) rather than silently ignored.
//
// Every error, not the first. Validation never stops early: each policy and
// each field is checked and all problems are joined with errors.Join, sorted
// by line, so one edit-run cycle fixes a file.
//
// Extensibility. Algorithm-specific fields are declared in algorithmFields;
// fields that apply to every algorithm in commonFields. Adding a setting (for
// example the cluster's lease settings) means a field in rawPolicy, an entry
// in one of those tables, a check in parsePolicy and a field in Policy.
// Unknown fields stay errors, so old binaries reject files that use settings
// they do not understand instead of misapplying them.
package policy
