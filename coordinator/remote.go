package coordinator

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/checkreq"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// The built-in edge (docs/design.md §3.4, "Remote decisions by default").
// Every server answers ration.v1.Admission/Check from leases of its own,
// held by an in-process client.Client (client ID "rationd/<server ID>")
// that reaches the cluster through this server's own gRPC address, as any
// client does: a remote decision is that client's Limiter.AllowN, so the
// server is one more lease holder and B + r·W holds over it and every
// other holder together. Clients with no Config.Edges send a key here
// while their own lease of it is too thin to serve it (client/edgeroute.go).
//
// The client is started on the first Check (a cluster nobody routes to
// holds no extra leases and runs no extra loop) and closed, releasing its
// leases, first thing in Shutdown. On a cluster with ACLs a Check needs
// the check right on every item's key (acl.RightCheck: a client token's
// bindings), and the client leases with this start's server identity
// (serverid.go) instead of a token: it may lease any key, as
// rationd/<server ID> only.

// remoteClientID is the built-in edge's lease-holder name.
func remoteClientID(serverID string) string { return acl.ServerClientID(serverID) }

// maxRemoteLimiters bounds the built-in edge's cache of limiters (the
// client keeps the limiters themselves, and evicts idle ones).
const maxRemoteLimiters = 1 << 16

// remotePressureKeys is the built-in edge's client.Config.PressureKeys
// (rationd edge's default, edge.DefaultPressureKeys).
const remotePressureKeys = 1024

type remoteService struct {
	api.UnimplementedAdmissionServer
	s *Server

	mu     sync.Mutex
	c      *client.Client // nil until the first Check; closed: set
	closed bool

	limMu    sync.RWMutex
	limiters map[string]*client.Limiter

	// promotions is the switch budget (promotions.go).
	promotions *promotionBudget

	calls, items, invalid atomic.Int64

	// counts: items by caller and result (BuiltinEdgeItems).
	countMu sync.Mutex
	counts  map[BuiltinEdgeKey]uint64
}

// BuiltinEdgeKey labels ration_builtin_edge_items_total: Caller is the
// token's accessor ID on a cluster with ACLs ("none" without; "other"
// past maxEdgeCallers callers), Result one of "allowed", "denied",
// "invalid" (the call refused as malformed), "unavailable" (the server
// shutting down), "not-evaluated" and "charged-after".
type BuiltinEdgeKey struct{ Caller, Result string }

// maxEdgeCallers bounds the metric's caller label values.
const maxEdgeCallers = 256

func (r *remoteService) count(ctx context.Context, result string, n int) {
	caller := "none"
	if tok := callerToken(ctx); tok != nil {
		caller = tok.AccessorID
	}
	r.countMu.Lock()
	defer r.countMu.Unlock()
	if r.counts == nil {
		r.counts = map[BuiltinEdgeKey]uint64{}
	}
	k := BuiltinEdgeKey{caller, result}
	if _, ok := r.counts[k]; !ok && len(r.counts) >= maxEdgeCallers*6 {
		k.Caller = "other"
	}
	r.counts[k] += uint64(n)
}

// itemCounts is a copy of counts.
func (r *remoteService) itemCounts() map[BuiltinEdgeKey]uint64 {
	r.countMu.Lock()
	defer r.countMu.Unlock()
	return maps.Clone(r.counts)
}

func newRemoteService(s *Server) *remoteService {
	return &remoteService{s: s, limiters: map[string]*client.Limiter{}, promotions: newPromotionBudget(int64(s.cfg.RemotePromotionRate))}
}

// client returns the built-in edge's client, starting it on first use;
// nil once the server shuts down.
func (r *remoteService) client() (*client.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, rpcerr.Error(codes.Unavailable, "the server is shutting down")
	}
	if r.c != nil {
		return r.c, nil
	}
	s := r.s
	creds := insecure.NewCredentials()
	if s.cfg.TLS != nil {
		// The server's own certificate, as a forwarded call presents it.
		creds = credentials.NewTLS(s.cfg.TLS.ClientConfig(s.cfg.peerServerName()))
	}
	addr := s.cfg.AdvertiseGRPCAddr
	if addr == "" {
		addr = s.GRPCAddr()
	}
	var token string
	if s.cfg.ACL {
		token = s.edgeSecret.String()
	}
	c, err := client.New(context.Background(), client.Config{Token: token,
		Servers: []string{addr}, ClientID: remoteClientID(s.cfg.ID), NoRemote: true,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)}, PressureKeys: remotePressureKeys,
		Logger: s.log.With("part", "builtin-edge"), TracerProvider: s.cfg.TracerProvider,
	})
	if err != nil {
		return nil, rpcerr.Errorf(codes.Internal, "the built-in edge: %v", err)
	}
	r.c = c
	return c, nil
}

// close releases the built-in edge's leases; later Checks are refused
// Unavailable.
func (r *remoteService) close() {
	r.mu.Lock()
	c := r.c
	r.c, r.closed = nil, true
	r.mu.Unlock()
	if c != nil {
		if err := c.Close(); err != nil {
			r.s.log.Warn("the built-in edge's leases were not all released", "err", err)
		}
	}
}

// limiter returns c's limiter for policy and key (wire names), from a
// bounded cache.
func (r *remoteService) limiter(c *client.Client, pol string, key client.Key) *client.Limiter {
	id := client.LimiterID(pol, key)
	r.limMu.RLock()
	l, ok := r.limiters[id]
	r.limMu.RUnlock()
	if ok {
		return l
	}
	l = c.WireLimiter(pol, key)
	r.limMu.Lock()
	if len(r.limiters) >= maxRemoteLimiters {
		r.limiters = map[string]*client.Limiter{}
	}
	r.limiters[id] = l
	r.limMu.Unlock()
	return l
}

// Check decides a batch of items from the built-in edge's leases (see
// api/check.proto). Its results carry the decision (allowed, reason,
// remaining, retry-after, shadow), not the RateLimit header fields that
// rationd edge adds.
func (r *remoteService) Check(ctx context.Context, req *api.CheckRequest) (*api.CheckResponse, error) {
	r.calls.Add(1)
	costs, err := checkreq.Validate(req)
	if err != nil {
		r.invalid.Add(1)
		r.count(ctx, "invalid", len(req.GetItems()))
		return nil, err
	}
	if checkreq.UsesReservations(req) {
		r.invalid.Add(1)
		return nil, rpcerr.Error(codes.Unimplemented, "reserve and settle items are served by rationd edge, which holds the reservations; a server's built-in edge has no reservation table")
	}
	items := req.GetItems()
	for i, it := range items {
		if p, ok := r.s.fsm.Policy(it.GetPolicy()); ok && p.Algorithm == policy.Concurrency {
			r.invalid.Add(1)
			r.count(ctx, "invalid", len(items))
			return nil, rpcerr.Errorf(codes.FailedPrecondition, "item %d: policy %q is a concurrency policy, which the Check API cannot serve (a call has no release)", i, it.GetPolicy())
		}
	}
	c, err := r.client()
	if err != nil {
		r.count(ctx, "unavailable", len(items))
		return nil, err
	}
	r.items.Add(int64(len(items)))
	lims := make([]*client.Limiter, len(items))
	ds := make([]client.Decision, len(items))
	for i, it := range items {
		lims[i] = r.limiter(c, it.GetPolicy(), client.Key(it.GetKey()))
	}
	evaluated, _ := checkreq.Decide(c, nil, req, costs, lims, ds, nil) // no reserve or settle items: no error
	if faults.Active(faults.RemoteWithoutLease) {
		// The negative control: what the lease refused is admitted anyway,
		// by no lease holder.
		for i := range evaluated {
			if !ds[i].Allowed {
				ds[i] = client.Decision{Verdict: client.Verdict{Allowed: true, Reason: client.Allowed}}
			}
		}
	}
	resp := &api.CheckResponse{Results: make([]*api.CheckResult, len(items)), Allowed: evaluated == len(items)}
	for i := range items {
		if i >= evaluated {
			resp.Results[i] = &api.CheckResult{Reason: "not-evaluated"}
			r.count(ctx, "not-evaluated", 1)
			continue
		}
		if items[i].GetChargeAfter() {
			resp.Results[i] = &api.CheckResult{Allowed: true, Reason: "charged-after"}
			r.count(ctx, "charged-after", 1)
			continue
		}
		if ds[i].Allowed {
			r.count(ctx, "allowed", 1)
		} else {
			r.count(ctx, "denied", 1)
		}
		d := ds[i]
		res := &api.CheckResult{Allowed: d.Allowed, Reason: d.Reason.String(), Remaining: max(d.RemainingMilli/lease.MilliPerToken, 0), Shadow: d.Shadow}
		if !d.Allowed {
			resp.Allowed = false
			if d.RetryAfter == lease.RetryNever {
				res.RetryNever = true
			} else {
				res.RetryAfter = durationpb.New(d.RetryAfter)
				res.RetryAfterSeconds = httplimit.CeilSeconds(d.RetryAfter)
			}
		}
		resp.Results[i] = res
	}
	for i := range evaluated {
		if items[i].GetPromote() {
			resp.Results[i].Promotion = r.promote(items[i].GetPolicy())
		}
	}
	return resp, nil
}

// promote answers a client's request to take a key of policy back to a
// lease of its own, from this server's switch budget; a policy the
// cluster does not store is denied (no lease of it can be taken).
func (r *remoteService) promote(policy string) api.Promotion {
	if _, ok := r.s.fsm.Policy(policy); !ok {
		return api.Promotion_PROMOTION_DENIED_TRY_LATER
	}
	return r.promotions.decide(policy, time.Now())
}

// ServesCheck reports whether this server answers the Check API (its
// built-in edge: once its gRPC server has started, with or without ACLs).
func (s *Server) ServesCheck() bool { return s.remote != nil }

// PromotionCounts returns this server's answers to promotion requests
// (the switch budget, docs/design.md §3.4), by policy; nil before the
// gRPC server has started (no built-in edge yet).
func (s *Server) PromotionCounts() []PromotionCount {
	if s.remote == nil {
		return nil
	}
	return s.remote.promotions.counts()
}
