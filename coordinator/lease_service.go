package coordinator

import (
	"context"
	"fmt"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

// leaseService implements api.LeasesServer: validate, forward to the leader
// if needed, queue into the batcher, answer after commit.
type leaseService struct {
	api.UnimplementedLeasesServer
	s *Server
}

// validateKeys bounds a request before anything reaches the log.
func (s *Server) validateRequest(c *api.Caller, keys []*api.Key, size int) error {
	if c == nil || c.GetClientId() == "" {
		return fmt.Errorf("%w: caller.client_id is required", rpcerr.ErrInvalid)
	}
	if len(c.GetClientId()) > fsm.MaxClientIDLen {
		return fmt.Errorf("%w: caller.client_id is %d bytes, more than %d", rpcerr.ErrInvalid, len(c.GetClientId()), fsm.MaxClientIDLen)
	}
	if c.GetSeq() == 0 {
		return fmt.Errorf("%w: caller.seq must be at least 1", rpcerr.ErrInvalid)
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
		if len(k.GetAttributes()) > 32 {
			return fmt.Errorf("%w: keys[%d] has %d attributes, more than 32", rpcerr.ErrInvalid, i, len(k.GetAttributes()))
		}
		for name, v := range k.GetAttributes() {
			if len(name) > policy.MaxKeyValueLen || len(v) > policy.MaxKeyValueLen {
				return fmt.Errorf("%w: keys[%d] attribute %.40q is longer than %d bytes", rpcerr.ErrInvalid, i, name, policy.MaxKeyValueLen)
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

func (l *leaseService) handle(ctx context.Context, op *api.LeaseOp, forward func(api.LeasesClient, context.Context) (proto.Message, error)) (fsm.OpResult, proto.Message, error) {
	conn, fctx, self, err := l.s.fwd.forward(ctx)
	if err != nil {
		return fsm.OpResult{}, nil, rpcerr.Status(err)
	}
	if !self {
		m, err := forward(api.NewLeasesClient(conn), fctx)
		return fsm.OpResult{}, m, err
	}
	r := l.s.batcher.submit(ctx, op)
	if r.Err != nil {
		return r, nil, rpcerr.Status(r.Err)
	}
	return r, nil, nil
}

func keysOf[T interface{ GetKey() *api.Key }](ks []T) []*api.Key {
	out := make([]*api.Key, len(ks))
	for i, k := range ks {
		out[i] = k.GetKey()
	}
	return out
}

// Keys a call's ACL token may not lease (acl.go, deniedKeys) are taken out
// of a valid request before it is forwarded or logged, and answered
// with a per-key PermissionDenied in their places: one such key does not
// fail the others, and nothing of it reaches the log.

// Acquire implements api.LeasesServer.
func (l *leaseService) Acquire(ctx context.Context, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	denied := l.s.acl.deniedKeys(ctx, keysOf(req.GetKeys()))
	if denied == nil {
		return l.acquire(ctx, req)
	}
	r := &api.LeaseResponse{ClusterTimeNanos: l.s.fsm.ClusterTime()}
	if keep := keepAllowed(req.GetKeys(), denied); len(keep) > 0 {
		var err error
		if r, err = l.acquire(ctx, &api.AcquireRequest{Caller: req.GetCaller(), Keys: keep}); err != nil {
			return nil, err
		}
	}
	leases, err := spliceDenied(len(req.GetKeys()), denied, r.GetLeases(), leaseRefusal)
	return &api.LeaseResponse{ClusterTimeNanos: r.GetClusterTimeNanos(), Leases: leases}, err
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

func (l *leaseService) acquire(ctx context.Context, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	r, fwd, err := l.handle(ctx, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}},
		func(c api.LeasesClient, ctx context.Context) (proto.Message, error) { return c.Acquire(ctx, req) })
	if err != nil {
		return nil, err
	}
	if fwd != nil {
		return fwd.(*api.LeaseResponse), nil
	}
	l.s.audit.acquired(req, r.Lease)
	return r.Lease, nil
}

// Renew implements api.LeasesServer.
func (l *leaseService) Renew(ctx context.Context, req *api.RenewRequest) (*api.LeaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	denied := l.s.acl.deniedKeys(ctx, keysOf(req.GetKeys()))
	if denied == nil {
		return l.renew(ctx, req)
	}
	r := &api.LeaseResponse{ClusterTimeNanos: l.s.fsm.ClusterTime()}
	if keep := keepAllowed(req.GetKeys(), denied); len(keep) > 0 {
		var err error
		if r, err = l.renew(ctx, &api.RenewRequest{Caller: req.GetCaller(), Keys: keep}); err != nil {
			return nil, err
		}
	}
	leases, err := spliceDenied(len(req.GetKeys()), denied, r.GetLeases(), leaseRefusal)
	return &api.LeaseResponse{ClusterTimeNanos: r.GetClusterTimeNanos(), Leases: leases}, err
}

func (l *leaseService) renew(ctx context.Context, req *api.RenewRequest) (*api.LeaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	if err := validateReports(req.GetCaller(), req.GetKeys()); err != nil {
		return nil, rpcerr.Status(err)
	}
	r, fwd, err := l.handle(ctx, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: req}},
		func(c api.LeasesClient, ctx context.Context) (proto.Message, error) { return c.Renew(ctx, req) })
	if err != nil {
		return nil, err
	}
	if fwd != nil {
		return fwd.(*api.LeaseResponse), nil
	}
	l.s.audit.renewed(req, r.Lease)
	return r.Lease, nil
}

// Release implements api.LeasesServer.
func (l *leaseService) Release(ctx context.Context, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	denied := l.s.acl.deniedKeys(ctx, keysOf(req.GetKeys()))
	if denied == nil {
		return l.release(ctx, req)
	}
	r := &api.ReleaseResponse{ClusterTimeNanos: l.s.fsm.ClusterTime()}
	if keep := keepAllowed(req.GetKeys(), denied); len(keep) > 0 {
		var err error
		if r, err = l.release(ctx, &api.ReleaseRequest{Caller: req.GetCaller(), Keys: keep}); err != nil {
			return nil, err
		}
	}
	results, err := spliceDenied(len(req.GetKeys()), denied, r.GetResults(), func(e *api.KeyError) *api.ReleaseResult { return &api.ReleaseResult{Error: e} })
	return &api.ReleaseResponse{ClusterTimeNanos: r.GetClusterTimeNanos(), Results: results}, err
}

func (l *leaseService) release(ctx context.Context, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	if err := l.s.validateRequest(req.GetCaller(), keysOf(req.GetKeys()), proto.Size(req)); err != nil {
		return nil, rpcerr.Status(err)
	}
	if err := validateReports(req.GetCaller(), req.GetKeys()); err != nil {
		return nil, rpcerr.Status(err)
	}
	r, fwd, err := l.handle(ctx, &api.LeaseOp{Op: &api.LeaseOp_Release{Release: req}},
		func(c api.LeasesClient, ctx context.Context) (proto.Message, error) { return c.Release(ctx, req) })
	if err != nil {
		return nil, err
	}
	if fwd != nil {
		return fwd.(*api.ReleaseResponse), nil
	}
	l.s.audit.released(req)
	return r.Release, nil
}
