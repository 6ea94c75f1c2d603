package grpclimit

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/lease"
)

// RetryDelay is the RetryInfo delay for a limiter's RetryAfter: rounded up
// to a whole millisecond, at least 1ms. ok is false when no wait admits
// the call (lease.RetryNever).
func RetryDelay(retryAfter time.Duration) (delay time.Duration, ok bool) {
	if retryAfter >= lease.RetryNever-time.Millisecond {
		return 0, false
	}
	if retryAfter <= 0 {
		return time.Millisecond, true
	}
	return (retryAfter + time.Millisecond - 1).Truncate(time.Millisecond), true
}

// refusal builds the status error for a decision refused by policy (the
// refusing layer's).
//
//	Limited, ExceedsCapacity: RESOURCE_EXHAUSTED with QuotaFailure (one
//	  violation, the policy) and RetryInfo (none for ExceedsCapacity: no
//	  wait admits the call).
//	NoLease, Unavailable: UNAVAILABLE with RetryInfo.
//
// Nothing in it tells the budget's level or any other caller's state.
func refusal(d client.Decision, policy string, cost int64) error {
	var code codes.Code
	var msg string
	var details []protoadapt.MessageV1
	switch d.Reason {
	case client.NoLease, client.Unavailable:
		code = codes.Unavailable
		msg = fmt.Sprintf("rate limiter unavailable: no usable lease for policy %s (fail-closed)", policy)
	default:
		code = codes.ResourceExhausted
		var desc string
		if d.Reason == client.ExceedsCapacity {
			desc = fmt.Sprintf("cost %d exceeds the most this policy can admit at once", cost)
			msg = fmt.Sprintf("rate limited: cost %d exceeds the capacity of policy %s", cost, policy)
		} else {
			desc = fmt.Sprintf("cost %d exceeds the quota available now", cost)
			msg = fmt.Sprintf("rate limited by policy %s", policy)
		}
		qf := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: policy, Description: desc}}}
		details = append(details, qf)
	}
	if delay, ok := RetryDelay(d.RetryAfter); ok && d.Reason != client.ExceedsCapacity {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	}
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// slotRetryDelay is the RetryInfo delay of a concurrency refusal: slots
// free as calls end, which no one can foresee; a second is the HTTP
// middleware's Retry-After too.
const slotRetryDelay = time.Second

// slotRefusal builds the status error of a refused slot (r sorts err):
//
//	Busy: RESOURCE_EXHAUSTED with QuotaFailure (the policy) and RetryInfo.
//	Ended: the context's status (CANCELLED or DEADLINE_EXCEEDED).
//	Unavailable: UNAVAILABLE with RetryInfo.
func slotRefusal(r inflight.Refusal, err error, policy string) error {
	var st *status.Status
	var details []protoadapt.MessageV1
	switch r {
	case inflight.Ended:
		return status.FromContextError(err).Err()
	case inflight.Busy:
		st = status.New(codes.ResourceExhausted, fmt.Sprintf("concurrency limited by policy %s: its slots are all in use across the cluster", policy))
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: policy,
			Description: "as many calls run at once as the policy allows"}}})
	default:
		// The cluster's reason (an unknown policy, say) is the operator's
		// to read in the server's logs, not the caller's.
		st = status.New(codes.Unavailable, fmt.Sprintf("concurrency limiter unavailable for policy %s", policy))
	}
	details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(slotRetryDelay)})
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
