// Package rpcerr maps ration's sentinel errors to gRPC status codes. It is
// the one place the mapping lives: the FSM uses it for per-key results and
// the coordinator for whole-RPC failures. Errors are matched with errors.Is,
// never by their text.
package rpcerr

import (
	"context"
	"errors"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind sentinels shared by the FSM and the coordinator. Wrap one of these
// (or a lease/policy sentinel) with fmt.Errorf("%w: ...") to pick the code.
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalid           = errors.New("invalid argument")
	ErrResourceExhausted = errors.New("resource exhausted")
	ErrStale             = errors.New("stale request")
	ErrUnavailable       = errors.New("unavailable")
	ErrExpired           = errors.New("expired")
	ErrPrecondition      = errors.New("failed precondition")
)

var table = []struct {
	err  error
	code codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrInvalid, codes.InvalidArgument},
	{ErrResourceExhausted, codes.ResourceExhausted},
	{ErrStale, codes.Aborted},
	{ErrUnavailable, codes.Unavailable},
	{ErrExpired, codes.FailedPrecondition},
	{ErrPrecondition, codes.FailedPrecondition},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{lease.ErrLeaseNotFound, codes.NotFound},
	{lease.ErrLeaseExpired, codes.FailedPrecondition},
	{lease.ErrStaleGrant, codes.Aborted},
	{lease.ErrTooManyLeases, codes.ResourceExhausted},
	{lease.ErrInvalidRequest, codes.InvalidArgument},
	{lease.ErrInvalidConfig, codes.InvalidArgument},
	{lease.ErrInvalidCost, codes.InvalidArgument},
	{lease.ErrTimeOutOfRange, codes.InvalidArgument},
	{lease.ErrTimeBackwards, codes.Internal},
	{policy.ErrInvalidPolicy, codes.InvalidArgument},
	{policy.ErrMissingKeyAttribute, codes.InvalidArgument},
	{policy.ErrKeyTooLong, codes.InvalidArgument},
	{policy.ErrNotLeasable, codes.FailedPrecondition},
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

// Status converts err to a gRPC status error with its code and message.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(Code(err), err.Error())
}
