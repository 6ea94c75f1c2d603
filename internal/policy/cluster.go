package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/lease"
)

// FailureMode says what a replica does when it has no usable lease and
// cannot reach the cluster. The values are the spellings used in the file.
type FailureMode string

// The supported failure modes.
const (
	// FailClosed: admit nothing beyond what leases already held allow.
	FailClosed FailureMode = "fail-closed"
	// FailOpen: admit locally at the policy's fallback rate. This adds
	// Σ(g_i + f_i·W) to the cluster-wide bound (docs/design.md §5).
	FailOpen FailureMode = "fail-open"
)

// Defaults and ranges of the cluster settings.
const (
	// DefaultLeaseDuration is the default lease duration D.
	DefaultLeaseDuration = 5 * time.Second
	// MinLeaseDuration and MaxLeaseDuration bound the lease duration.
	MinLeaseDuration = 100 * time.Millisecond
	MaxLeaseDuration = 24 * time.Hour
	// DefaultRenewDivisor: renew_after defaults to the lease duration
	// divided by this.
	DefaultRenewDivisor = 3
	// DefaultDriftPPM is the default clock-rate error bound ρ, in parts
	// per million; MaxDriftPPM the largest accepted.
	DefaultDriftPPM = 1000
	MaxDriftPPM     = lease.MaxDriftPPM
	// DefaultClientWeight is the default fair-share weight; MaxWeight the
	// largest (weights are in [1, MaxWeight]).
	DefaultClientWeight = 1
	MaxWeight           = 1 << 20
	// MaxClientIDLen is the longest client ID in weights.clients, in bytes.
	MaxClientIDLen = limits.ClientIDBytes
	// DefaultFailure is the default failure mode.
	DefaultFailure = FailClosed
	// DefaultMaxKeys is the default bound on distinct key values per
	// policy; MaxKeysLimit the largest accepted bound.
	DefaultMaxKeys = 10_000
	MaxKeysLimit   = 1_000_000
	// DefaultMaxLeasesPerKey is the default bound on live leases per key;
	// MaxLeasesPerKeyLimit the largest accepted bound.
	DefaultMaxLeasesPerKey = 1024
	MaxLeasesPerKeyLimit   = 65536
	// DefaultKeysPerValueDivisor: a token-bucket policy's max_keys_per_value
	// defaults to max_keys/DefaultKeysPerValueDivisor (at least 1), so one
	// value of its first key attribute (one tenant) holds at most a tenth
	// of its keys (KeysPerValue).
	DefaultKeysPerValueDivisor = 10
	// MaxKeyValueLen is the longest key attribute value CanonicalKey
	// accepts, in bytes.
	MaxKeyValueLen = limits.KeyValueBytes
	// MinLeasedWindow is the shortest window the cluster leases. A
	// window's chunk lease ends with its window, and its renewals come
	// every window/16, at least 50 ms (docs/design.md §8.1): in a window
	// much shorter than a second the lease round trips eat the window.
	// On an in-process cluster (four replicas offering 3× a limit of 20),
	// 50 ms windows admitted 0 to 100% of the limit, 100 ms ones 70 to
	// 85%, 250 ms ones and longer 100%; a real network's round trips are
	// longer, and RateLimit-Policy counts a window in whole seconds.
	MinLeasedWindow = time.Second
)

// Errors of the cluster helpers.
var (
	// ErrNotLeasable is returned by Leasable for a window algorithm.
	ErrNotLeasable = errors.New("policy is not leasable")
	// ErrMissingKeyAttribute is wrapped by CanonicalKey when a request
	// lacks one of the policy's key attributes.
	ErrMissingKeyAttribute = errors.New("missing key attribute")
	// ErrKeyTooLong is wrapped by CanonicalKey when a key attribute value
	// is longer than MaxKeyValueLen bytes.
	ErrKeyTooLong = errors.New("key attribute value too long")
)

// applyDefaults sets the cluster settings a file may leave out: the lease
// settings (RenewAfterNanos excepted: it depends on the duration), weights
// and failure mode for a token bucket, and the bounds for every algorithm.
func (p *Policy) applyDefaults() {
	if p.Algorithm == TokenBucket {
		p.LeaseDurationNanos = int64(DefaultLeaseDuration)
		p.DriftPPM = DefaultDriftPPM
		p.DefaultWeight = DefaultClientWeight
		p.Failure = DefaultFailure
	}
	p.MaxKeys = DefaultMaxKeys
	p.MaxLeasesPerKey = DefaultMaxLeasesPerKey
}

// KeysPerValue is the most live keys the policy may track that share the
// value of its first key attribute: MaxKeysPerValue, or when it is 0 (the
// default) max(1, MaxKeys/DefaultKeysPerValueDivisor). A policy with fewer
// than two key attributes has one key per value, so it never binds.
func (p Policy) KeysPerValue() int64 {
	if p.MaxKeysPerValue > 0 {
		return p.MaxKeysPerValue
	}
	return max(1, p.MaxKeys/DefaultKeysPerValueDivisor)
}

// defaultRenewAfter is renew_after's default for a lease duration.
func defaultRenewAfter(durationNanos int64) int64 {
	return durationNanos / DefaultRenewDivisor
}

// usableSpan is the part of a lease a client may use, on its own clock:
// duration·(1−ρ)/(1+ρ), rounded down (lease.ClientUsableNanos).
func usableSpan(durationNanos, driftPPM int64) int64 {
	return lease.ClientUsableNanos(durationNanos, driftPPM)
}

// Weight is the fair-share weight of the client with the given ID: its
// entry in ClientWeights, else DefaultWeight. It is meaningful for token
// buckets only (0 for a window policy).
func (p Policy) Weight(clientID string) int64 {
	if w, ok := p.ClientWeights[clientID]; ok {
		return w
	}
	return p.DefaultWeight
}

// Leasable reports whether the cluster can enforce p: nil for a token
// bucket and a valid fixed or approximate sliding window (leased in
// chunks, docs/design.md §8) of MinLeasedWindow or longer, an error
// wrapping ErrNotLeasable otherwise (and an *Error naming the field, for
// a window too short). The cluster checks it when a policy is applied
// (Admin.ApplyPolicies, or a server's initial policies), never when it
// replays or restores a stored one, so a shorter window stored before the
// minimum existed is still served.
func (p Policy) Leasable() error {
	switch p.Algorithm {
	case TokenBucket:
		return nil
	case FixedWindow, SlidingWindowApprox:
		if _, err := p.WindowSpec(); err != nil {
			return fmt.Errorf("%w: policy %q: %v", ErrNotLeasable, p.Name, err)
		}
		if p.Period == "" && p.WindowNanos < int64(MinLeasedWindow) {
			return fmt.Errorf("%w: %w", ErrNotLeasable, &Error{PolicyName: p.Name, Field: fWindow, Msg: fmt.Sprintf(
				"%s is shorter than %s, the shortest window the cluster leases (a window's chunk lease ends with the window, so lease round trips and renewals would use up a shorter one); want a window of %s or longer, or a token bucket for a rate",
				formatWindow(p.WindowNanos), formatWindow(int64(MinLeasedWindow)), formatWindow(int64(MinLeasedWindow)))})
		}
		return nil
	case Concurrency:
		if err := lease.ValidateSlotRules(p.SlotClientConfig(), int64(DefaultLeaseDuration)); err != nil {
			return fmt.Errorf("%w: policy %q: %v", ErrNotLeasable, p.Name, err)
		}
		return nil
	}
	return fmt.Errorf("%w: policy %q uses %s: the cluster leases token buckets, fixed windows and approximate sliding windows only; the exact sliding window is for simulate",
		ErrNotLeasable, p.Name, p.Algorithm)
}

// CanonicalKey is the budget a request with the given attributes falls in:
// the values of p's key attributes, in p.Key order, each escaped with
// url.PathEscape and joined with "/" ("" for a policy without key
// attributes: one global budget). Escaping makes the key injective: a "/"
// in a value becomes %2F, so ("a/b", "c") and ("a", "b/c") differ.
// Attributes p does not key on are ignored. A missing key attribute is an
// error wrapping ErrMissingKeyAttribute; a value longer than MaxKeyValueLen
// bytes one wrapping ErrKeyTooLong. An empty value is a value.
func (p Policy) CanonicalKey(attrs map[string]string) (string, error) {
	if len(p.Key) == 0 {
		return "", nil
	}
	var b strings.Builder
	for i, name := range p.Key {
		v, ok := attrs[name]
		if !ok {
			return "", fmt.Errorf("%w: policy %q is keyed on %q, which the request does not have", ErrMissingKeyAttribute, p.Name, name)
		}
		if len(v) > MaxKeyValueLen {
			return "", fmt.Errorf("%w: policy %q: key attribute %q is %d bytes, more than %d", ErrKeyTooLong, p.Name, name, len(v), MaxKeyValueLen)
		}
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(url.PathEscape(v))
	}
	return b.String(), nil
}

// SlotClientConfig is a concurrency policy's client rules: its max_duration
// and cancel_grace with the slot lease's drift bound.
func (p Policy) SlotClientConfig() lease.SlotClientConfig {
	return lease.SlotClientConfig{DriftPPM: DefaultDriftPPM, MaxDurationNanos: p.MaxDurationNanos, CancelGraceNanos: p.CancelGraceNanos}
}
