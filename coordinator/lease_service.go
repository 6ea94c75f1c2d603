package coordinator

import (
	"context"
	"fmt"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

// leaseService implements api.LeasesServer: validate, forward to the leader
// if needed, queue into the batcher, answer after commit.
type leaseService struct {
	api.UnimplementedLeasesServer
	s *Server
}

// validateRequest bounds a request before anything reaches the log.
func (s *Server) validateRequest(c *api.Caller, keys []*api.Key, size int) error {
	if err := limits.CheckCaller(c); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: the request names no keys", rpcerr.ErrInvalid)
	}
	if len(keys) > s.cfg.MaxKeysPerRequest {
		return fmt.Errorf("%w: %d keys in one request, more than the limit %d", rpcerr.ErrInvalid, len(keys), s.cfg.MaxKeysPerRequest)
	}
	if size > s.cfg.MaxRequestBytes {
		return fmt.Errorf("%w: request is %d bytes, more than %d", rpcerr.ErrInvalid, size, s.cfg.MaxRequestBytes)
	}
	for i, k := range keys {
		if k.GetPolicy() == "" {
			return fmt.Errorf("%w: keys[%d].policy is empty", rpcerr.ErrInvalid, i)
		}
		if len(k.GetAttributes()) > limits.KeyAttributes {
			return fmt.Errorf("%w: keys[%d] has %d attributes, more than %d", rpcerr.ErrInvalid, i, len(k.GetAttributes()), limits.KeyAttributes)
		}
		for name, v := range k.GetAttributes() {
			if len(name) > limits.KeyValueBytes || len(v) > limits.KeyValueBytes {
				return fmt.Errorf("%w: keys[%d] attribute %.40q is longer than %d bytes", rpcerr.ErrInvalid, i, name, limits.KeyValueBytes)
			}
		}
	}
	return nil
}

// auditReport is a RenewKey's or ReleaseKey's report to the audit.
type auditReport interface {
	GetAdmittedMilli() int64
	GetAdmittedSinceSeq() uint64
}

// validateReports refuses audit reports no correct client sends: a
// negative count, or a base request that is not earlier than this one.
func validateReports[T auditReport](c *api.Caller, keys []T) error {
	for i, k := range keys {
		if k.GetAdmittedMilli() < 0 {
			return fmt.Errorf("%w: keys[%d].admitted_milli is negative (%d)", rpcerr.ErrInvalid, i, k.GetAdmittedMilli())
		}
		if s := k.GetAdmittedSinceSeq(); s != 0 && s >= c.GetSeq() {
			return fmt.Errorf("%w: keys[%d].admitted_since_seq %d is not before caller.seq %d", rpcerr.ErrInvalid, i, s, c.GetSeq())
		}
	}
	return nil
}

func keysOf[T interface{ GetKey() *api.Key }](ks []T) []*api.Key {
	out := make([]*api.Key, len(ks))
	for i, k := range ks {
		out[i] = k.GetKey()
	}
	return out
}

// leaseRequest is an AcquireRequest, a RenewRequest or a ReleaseRequest.
type leaseRequest interface {
	proto.Message
	GetCaller() *api.Caller
}

// keyed is one key of a lease request.
type keyed interface{ GetKey() *api.Key }

// leaseResponse is a LeaseResponse or a ReleaseResponse.
type leaseResponse interface{ GetClusterTimeNanos() int64 }

// leaseRPC is what one lease RPC has of its own; serveLease does the rest.
// Req's keys are K; Resp answers each with an E.
type leaseRPC[Req leaseRequest, K keyed, Resp leaseResponse, E any] struct {
	keys    func(Req) []K
	reports func(*api.Caller, []K) error // the audit reports' check; nil: none
	only    func(Req, []K) Req           // the request for these of its keys
	op      func(Req) *api.LeaseOp
	remote  func(api.LeasesClient, context.Context, Req) (Resp, error)
	local   func(*Server, Req, fsm.OpResult) Resp // the committed answer, audited
	answers func(Resp) []E
	refused func(*api.KeyError) E
	answer  func(clusterTime int64, answers []E) Resp
}

// Keys a call's ACL token may not lease (acl.go, deniedKeys) are taken out
// of a valid request before it is forwarded or logged, and answered
// with a per-key PermissionDenied in their places: one such key does not
// fail the others, and nothing of it reaches the log.

// serveLease runs one lease RPC: it validates the request (once), takes
// out the keys the call's ACL token may not lease, and commits the rest
// (commitLease).
func serveLease[Req leaseRequest, K keyed, Resp leaseResponse, E any](l *leaseService, ctx context.Context, rpc leaseRPC[Req, K, Resp, E], req Req) (Resp, error) {
	var zero Resp
	keys := rpc.keys(req)
	if err := l.s.validateRequest(req.GetCaller(), keysOf(keys), proto.Size(req)); err != nil {
		return zero, rpcerr.Status(err)
	}
	if rpc.reports != nil {
		if err := rpc.reports(req.GetCaller(), keys); err != nil {
			return zero, rpcerr.Status(err)
		}
	}
	denied := l.s.acl.deniedKeys(ctx, keysOf(keys))
	if denied == nil {
		return commitLease(l, ctx, rpc, req)
	}
	clusterTime := l.s.fsm.ClusterTime()
	var got []E
	if keep := keepAllowed(keys, denied); len(keep) > 0 {
		r, err := commitLease(l, ctx, rpc, rpc.only(req, keep))
		if err != nil {
			return zero, err
		}
		clusterTime, got = r.GetClusterTimeNanos(), rpc.answers(r)
	}
	out, err := spliceDenied(len(keys), denied, got, rpc.refused)
	if err != nil {
		return zero, err
	}
	return rpc.answer(clusterTime, out), nil
}

// commitLease commits a validated request on the leader: queued into the
// batcher here, or forwarded.
func commitLease[Req leaseRequest, K keyed, Resp leaseResponse, E any](l *leaseService, ctx context.Context, rpc leaseRPC[Req, K, Resp, E], req Req) (Resp, error) {
	var zero Resp
	conn, fctx, self, err := l.s.fwd.forward(ctx)
	if err != nil {
		return zero, rpcerr.Status(err)
	}
	if !self {
		return rpc.remote(api.NewLeasesClient(conn), fctx, req)
	}
	r := l.s.batcher.submit(ctx, rpc.op(req))
	if r.Err != nil {
		return zero, rpcerr.Status(r.Err)
	}
	return rpc.local(l.s, req, r), nil
}

func leaseRefusal(e *api.KeyError) *api.KeyLease { return &api.KeyLease{Error: e} }

// keepAllowed returns the keys not denied, in order.
func keepAllowed[K any](keys []K, denied map[int]*api.KeyError) []K {
	var keep []K
	for i, k := range keys {
		if denied[i] == nil {
			keep = append(keep, k)
		}
	}
	return keep
}

// spliceDenied puts a refusal for each denied key in its place among got,
// the answers for the kept keys in order, for an answer to all n keys.
func spliceDenied[E any](n int, denied map[int]*api.KeyError, got []E, refusal func(*api.KeyError) E) ([]E, error) {
	if len(got) != n-len(denied) {
		return nil, rpcerr.Status(fmt.Errorf("%w: %d answers for %d keys", rpcerr.ErrUnavailable, len(got), n-len(denied)))
	}
	out := make([]E, 0, n)
	for i := range n {
		if e := denied[i]; e != nil {
			out = append(out, refusal(e))
			continue
		}
		out = append(out, got[0])
		got = got[1:]
	}
	return out, nil
}

var acquireRPC = leaseRPC[*api.AcquireRequest, *api.AcquireKey, *api.LeaseResponse, *api.KeyLease]{
	keys: (*api.AcquireRequest).GetKeys,
	only: func(r *api.AcquireRequest, keys []*api.AcquireKey) *api.AcquireRequest {
		return &api.AcquireRequest{Caller: r.GetCaller(), Keys: keys}
	},
	op: func(r *api.AcquireRequest) *api.LeaseOp { return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: r}} },
	remote: func(c api.LeasesClient, ctx context.Context, r *api.AcquireRequest) (*api.LeaseResponse, error) {
		return c.Acquire(ctx, r)
	},
	local: func(s *Server, r *api.AcquireRequest, res fsm.OpResult) *api.LeaseResponse {
		s.audit.acquired(r, res.Lease)
		return res.Lease
	},
	answers: (*api.LeaseResponse).GetLeases,
	refused: leaseRefusal,
	answer:  leaseAnswer,
}

var renewRPC = leaseRPC[*api.RenewRequest, *api.RenewKey, *api.LeaseResponse, *api.KeyLease]{
	keys:    (*api.RenewRequest).GetKeys,
	reports: validateReports[*api.RenewKey],
	only: func(r *api.RenewRequest, keys []*api.RenewKey) *api.RenewRequest {
		return &api.RenewRequest{Caller: r.GetCaller(), Keys: keys}
	},
	op: func(r *api.RenewRequest) *api.LeaseOp { return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: r}} },
	remote: func(c api.LeasesClient, ctx context.Context, r *api.RenewRequest) (*api.LeaseResponse, error) {
		return c.Renew(ctx, r)
	},
	local: func(s *Server, r *api.RenewRequest, res fsm.OpResult) *api.LeaseResponse {
		s.audit.renewed(r, res.Lease)
		return res.Lease
	},
	answers: (*api.LeaseResponse).GetLeases,
	refused: leaseRefusal,
	answer:  leaseAnswer,
}

var releaseRPC = leaseRPC[*api.ReleaseRequest, *api.ReleaseKey, *api.ReleaseResponse, *api.ReleaseResult]{
	keys:    (*api.ReleaseRequest).GetKeys,
	reports: validateReports[*api.ReleaseKey],
	only: func(r *api.ReleaseRequest, keys []*api.ReleaseKey) *api.ReleaseRequest {
		return &api.ReleaseRequest{Caller: r.GetCaller(), Keys: keys}
	},
	op: func(r *api.ReleaseRequest) *api.LeaseOp { return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: r}} },
	remote: func(c api.LeasesClient, ctx context.Context, r *api.ReleaseRequest) (*api.ReleaseResponse, error) {
		return c.Release(ctx, r)
	},
	local: func(s *Server, r *api.ReleaseRequest, res fsm.OpResult) *api.ReleaseResponse {
		s.audit.released(r)
		return res.Release
	},
	answers: (*api.ReleaseResponse).GetResults,
	refused: func(e *api.KeyError) *api.ReleaseResult { return &api.ReleaseResult{Error: e} },
	answer: func(t int64, results []*api.ReleaseResult) *api.ReleaseResponse {
		return &api.ReleaseResponse{ClusterTimeNanos: t, Results: results}
	},
}

func leaseAnswer(t int64, leases []*api.KeyLease) *api.LeaseResponse {
	return &api.LeaseResponse{ClusterTimeNanos: t, Leases: leases}
}

// Acquire implements api.LeasesServer.
func (l *leaseService) Acquire(ctx context.Context, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	return serveLease(l, ctx, acquireRPC, req)
}

// Renew implements api.LeasesServer.
func (l *leaseService) Renew(ctx context.Context, req *api.RenewRequest) (*api.LeaseResponse, error) {
	return serveLease(l, ctx, renewRPC, req)
}

// Release implements api.LeasesServer.
func (l *leaseService) Release(ctx context.Context, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	return serveLease(l, ctx, releaseRPC, req)
}
