// Package rpcerr maps ration's sentinel errors to gRPC status codes. It is
// the one place the mapping lives: the FSM uses it for per-key results and
// the coordinator for whole-RPC failures. Errors are matched with errors.Is,
// never by their text.
//
// A status built here for an error of a known kind carries that kind as a
// google.rpc.ErrorInfo detail (domain Domain, reason the kind's name without
// its ERROR_KIND_ prefix, e.g. OLDER_INCARNATION); so does one built from a
// per-key error (KeyStatus), also when it was answered from the record of a
// retried request, which keeps the kind. Callers decide by Reason, never by
// a message.
package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind sentinels shared by the FSM and the coordinator. Wrap one of these
// (or a lease/policy sentinel) with fmt.Errorf("%w: ...") to pick the code.
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalid           = limits.ErrInvalid // every out-of-bounds request's error
	ErrResourceExhausted = errors.New("resource exhausted")
	ErrStale             = errors.New("stale request")
	ErrUnavailable       = errors.New("unavailable")
	ErrExpired           = errors.New("expired")
	ErrPrecondition      = errors.New("failed precondition")
	ErrPermissionDenied  = errors.New("permission denied")
	// ErrOlderIncarnation: the caller is an older incarnation of its client
	// ID than one that has already spoken (another process uses the ID).
	// It is a stale request too: errors.Is(err, ErrStale) holds, and its
	// text is ErrStale's.
	ErrOlderIncarnation = fmt.Errorf("%w", ErrStale)
)

// table maps each sentinel to its code and its stable kind (the kind is
// what a replicated idempotency record keeps; KindCode gives the code back).
var table = []struct {
	err  error
	code codes.Code
	kind api.ErrorKind
}{
	{ErrNotFound, codes.NotFound, api.ErrorKind_ERROR_KIND_NOT_FOUND},
	{ErrInvalid, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{ErrResourceExhausted, codes.ResourceExhausted, api.ErrorKind_ERROR_KIND_RESOURCE_EXHAUSTED},
	{ErrOlderIncarnation, codes.Aborted, api.ErrorKind_ERROR_KIND_OLDER_INCARNATION}, // before ErrStale, which it wraps
	{ErrStale, codes.Aborted, api.ErrorKind_ERROR_KIND_STALE},
	{ErrUnavailable, codes.Unavailable, api.ErrorKind_ERROR_KIND_UNAVAILABLE},
	{ErrExpired, codes.FailedPrecondition, api.ErrorKind_ERROR_KIND_EXPIRED},
	{ErrPrecondition, codes.FailedPrecondition, api.ErrorKind_ERROR_KIND_PRECONDITION},
	{ErrPermissionDenied, codes.PermissionDenied, api.ErrorKind_ERROR_KIND_PERMISSION_DENIED},
	{context.DeadlineExceeded, codes.DeadlineExceeded, api.ErrorKind_ERROR_KIND_UNKNOWN},
	{context.Canceled, codes.Canceled, api.ErrorKind_ERROR_KIND_UNKNOWN},
	{lease.ErrLeaseNotFound, codes.NotFound, api.ErrorKind_ERROR_KIND_LEASE_NOT_FOUND},
	{lease.ErrLeaseExpired, codes.FailedPrecondition, api.ErrorKind_ERROR_KIND_LEASE_EXPIRED},
	{lease.ErrStaleGrant, codes.Aborted, api.ErrorKind_ERROR_KIND_STALE},
	{lease.ErrTooManyLeases, codes.ResourceExhausted, api.ErrorKind_ERROR_KIND_TOO_MANY_LEASES},
	{lease.ErrInvalidRequest, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{lease.ErrInvalidConfig, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{lease.ErrInvalidCost, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{lease.ErrTimeOutOfRange, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{lease.ErrTimeBackwards, codes.Internal, api.ErrorKind_ERROR_KIND_INTERNAL},
	{policy.ErrInvalidPolicy, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{policy.ErrMissingKeyAttribute, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{policy.ErrKeyTooLong, codes.InvalidArgument, api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{policy.ErrNotLeasable, codes.FailedPrecondition, api.ErrorKind_ERROR_KIND_PRECONDITION},
}

// kindCodes is the code of each kind. A kind groups sentinels of one code,
// so KindCode(Kind(err)) == Code(err) for every error the table knows
// (TestKindKeepsTheCode); an unknown error is INTERNAL, Unknown.
var kindCodes = map[api.ErrorKind]codes.Code{
	api.ErrorKind_ERROR_KIND_NOT_FOUND:          codes.NotFound,
	api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT:   codes.InvalidArgument,
	api.ErrorKind_ERROR_KIND_RESOURCE_EXHAUSTED: codes.ResourceExhausted,
	api.ErrorKind_ERROR_KIND_TOO_MANY_LEASES:    codes.ResourceExhausted,
	api.ErrorKind_ERROR_KIND_STALE:              codes.Aborted,
	api.ErrorKind_ERROR_KIND_UNAVAILABLE:        codes.Unavailable,
	api.ErrorKind_ERROR_KIND_EXPIRED:            codes.FailedPrecondition,
	api.ErrorKind_ERROR_KIND_PRECONDITION:       codes.FailedPrecondition,
	api.ErrorKind_ERROR_KIND_LEASE_NOT_FOUND:    codes.NotFound,
	api.ErrorKind_ERROR_KIND_LEASE_EXPIRED:      codes.FailedPrecondition,
	api.ErrorKind_ERROR_KIND_INTERNAL:           codes.Internal,
	api.ErrorKind_ERROR_KIND_UNKNOWN:            codes.Unknown,
	api.ErrorKind_ERROR_KIND_PERMISSION_DENIED:  codes.PermissionDenied,
	api.ErrorKind_ERROR_KIND_OLDER_INCARNATION:  codes.Aborted,
}

var kindMessages = map[api.ErrorKind]string{
	api.ErrorKind_ERROR_KIND_NOT_FOUND:          "not found: the policy or key does not exist",
	api.ErrorKind_ERROR_KIND_INVALID_ARGUMENT:   "invalid argument in the request",
	api.ErrorKind_ERROR_KIND_RESOURCE_EXHAUSTED: "resource exhausted: the policy's max_keys, or its max_keys_per_value for the key's first attribute, is reached",
	api.ErrorKind_ERROR_KIND_TOO_MANY_LEASES:    "lease: too many leases for this key (max_leases_per_key reached)",
	api.ErrorKind_ERROR_KIND_STALE:              "stale request: a newer request or grant exists",
	api.ErrorKind_ERROR_KIND_UNAVAILABLE:        "unavailable",
	api.ErrorKind_ERROR_KIND_EXPIRED:            "expired",
	api.ErrorKind_ERROR_KIND_PRECONDITION:       "failed precondition: the policy cannot be leased",
	api.ErrorKind_ERROR_KIND_LEASE_NOT_FOUND:    "lease: no such lease; acquire a new lease",
	api.ErrorKind_ERROR_KIND_LEASE_EXPIRED:      "lease: lease is gone (expired, released or replaced); acquire a new lease",
	api.ErrorKind_ERROR_KIND_INTERNAL:           "internal error",
	api.ErrorKind_ERROR_KIND_UNKNOWN:            "unknown error",
	api.ErrorKind_ERROR_KIND_PERMISSION_DENIED:  "permission denied: the ACL token may not lease this key",
	api.ErrorKind_ERROR_KIND_OLDER_INCARNATION:  "stale request: a newer incarnation of this client ID exists (another process uses it)",
}

// Kind returns the stable kind of err (UNSPECIFIED for nil, UNKNOWN for
// an error the table does not know, whose code is Unknown).
func Kind(err error) api.ErrorKind {
	if err == nil {
		return api.ErrorKind_ERROR_KIND_UNSPECIFIED
	}
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e.kind
		}
	}
	return api.ErrorKind_ERROR_KIND_UNKNOWN
}

// KindCode is the gRPC code of a kind (Unknown for one this build does not
// know).
func KindCode(k api.ErrorKind) codes.Code {
	if c, ok := kindCodes[k]; ok {
		return c
	}
	return codes.Unknown
}

// KindMessage is the message an answer derived from a kind alone carries
// (a retry answered from the replicated record of its request): the
// original message, with its details, went to the first attempt.
func KindMessage(k api.ErrorKind) string {
	if m, ok := kindMessages[k]; ok {
		return m + " (answered from the record of this request)"
	}
	return "unknown error kind " + k.String() + " (answered from the record of this request)"
}

// Code returns the gRPC code for err: OK for nil, the code of the first
// sentinel err wraps, or Unknown.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return codes.Unknown
}

// Status converts err to a gRPC status error with its code and message,
// and its kind's ErrorInfo when the kind is known. A status error is
// returned as it is.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return withKind(status.New(Code(err), err.Error()), Kind(err)).Err()
}

// KeyStatus is the status error of a per-key error: its code and message
// (derived from its kind when answered from a record, fsm answerForm) and
// its kind's ErrorInfo. nil for nil.
func KeyStatus(e *api.KeyError) error {
	if e == nil {
		return nil
	}
	return withKind(status.New(codes.Code(e.GetCode()), e.GetMessage()), e.GetKind()).Err()
}

// Domain is the domain of the ErrorInfo details ration's statuses carry.
const Domain = "ration.dev"

// ReasonOlderIncarnation is the ErrorInfo reason of a refusal of an older
// incarnation of a client ID (ERROR_KIND_OLDER_INCARNATION).
const ReasonOlderIncarnation = "OLDER_INCARNATION"

// reasonOf is the ErrorInfo reason of a kind: its name without the
// ERROR_KIND_ prefix ("" for none or one of no meaning).
func reasonOf(k api.ErrorKind) string {
	if _, ok := kindCodes[k]; !ok || k == api.ErrorKind_ERROR_KIND_UNKNOWN {
		return ""
	}
	return strings.TrimPrefix(k.String(), "ERROR_KIND_")
}

func withKind(st *status.Status, k api.ErrorKind) *status.Status {
	r := reasonOf(k)
	if r == "" || st.Code() == codes.OK {
		return st
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: r, Domain: Domain}); err == nil {
		return d
	}
	return st
}

// Reason returns the ErrorInfo reason err carries in Domain: from the
// error's kind for an error the table knows, else from the details of the
// gRPC status it is or wraps; "" when there is none.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	if r := reasonOf(Kind(err)); r != "" {
		return r
	}
	s, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info.GetReason()
		}
	}
	return ""
}

// IsOlderIncarnation reports whether err is a refusal of an older
// incarnation of the caller's client ID: another, newer process uses it.
func IsOlderIncarnation(err error) bool { return Reason(err) == ReasonOlderIncarnation }

// Error is the gRPC status error of code with message msg, for a refusal
// no sentinel names (every status outside this package is built here or
// by Status, KeyStatus or Errorf).
func Error(code codes.Code, msg string) error { return status.New(code, msg).Err() }

// Errorf is Error with a formatted message. It keeps no error it formats:
// a status carries a code and a message (use Status to keep a sentinel's
// kind).
func Errorf(code codes.Code, format string, args ...any) error {
	return status.New(code, fmt.Sprintf(format, args...)).Err()
}
