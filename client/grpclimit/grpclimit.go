package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// KeyFunc names the budget a call is charged to under one layer's policy,
// from the call's context, full method name ("/pkg.Service/Method") and
// principal ("" when anonymous). Only the policy's key attributes count.
// A nil result skips the layer for this call; an empty, non-nil Key is
// the policy's one budget (a policy without key attributes).
type KeyFunc func(ctx context.Context, fullMethod, principal string) client.Key

// PrincipalKey keys the layer by principal: Key{attr: principal}. Every
// anonymous caller shares the one budget of the empty value; reject
// unauthenticated calls in the auth interceptor if they should not.
func PrincipalKey(attr string) KeyFunc {
	return func(_ context.Context, _, principal string) client.Key {
		return client.Key{attr: principal}
	}
}

// MethodKey keys the layer by method: Key{attr: fullMethod}.
func MethodKey(attr string) KeyFunc {
	return func(_ context.Context, fullMethod, _ string) client.Key {
		return client.Key{attr: fullMethod}
	}
}

// StaticKey charges every call to the one budget k.
func StaticKey(k client.Key) KeyFunc {
	return func(context.Context, string, string) client.Key { return k }
}

// CostFunc is what a call costs, in tokens. A cost of 0 makes the call
// free: it is not checked. A negative cost (a pricing bug) fails the call
// with INTERNAL, never lets it through free; a cost above every policy's
// burst (above client.MaxCost at most) is RESOURCE_EXHAUSTED without
// RetryInfo.
type CostFunc func(ctx context.Context, fullMethod string) int64

// ConstCost makes every call cost n.
func ConstCost(n int64) CostFunc {
	return func(context.Context, string) int64 { return n }
}

// CostTable prices calls by full method name, and others at def.
func CostTable(table map[string]int64, def int64) CostFunc {
	t := make(map[string]int64, len(table))
	for k, v := range table {
		t[k] = v
	}
	return func(_ context.Context, fullMethod string) int64 {
		if c, ok := t[fullMethod]; ok {
			return c
		}
		return def
	}
}

// Layer is one policy a call is charged under.
type Layer struct {
	// Policy is the ration policy's name; it is also the QuotaFailure
	// violation's subject and the metrics' policy label.
	Policy string
	// Key names the budget (nil: the policy's one budget, client.Key{}).
	Key KeyFunc
	// Shadow makes the layer advisory whatever the policy says: it is
	// charged only for calls the other layers admitted, never refuses
	// (not even before the first lease, when the client cannot yet know a
	// policy is shadow: NoLease), and counts its would-be refusals as
	// outcome "shadow". A policy configured shadow: true in the cluster
	// never refuses either, once its lease is held.
	Shadow bool
}

// Config configures the interceptors.
type Config struct {
	// Client admits; it must outlive the server.
	Client *client.Client
	// Layers are charged all or nothing (Client.AllowAllDetail), in order.
	Layers []Layer
	// Cost prices a call (default: 1 token).
	Cost CostFunc
	// SettleAfter makes Cost an estimate: an admitted call's (or
	// stream's) context carries a settlement the handler calls with the
	// measured cost (Settle), or adds to as it goes (AddCost, settled
	// when the handler returns), which charges every layer what the
	// estimate missed, after the fact and never refused
	// (client.Limiter.Charge, docs/design.md §4.1), or refunds what it
	// saved (the estimate is a client.Reservation). A handler that does
	// neither keeps the estimate. Default off (no per-call allocation).
	SettleAfter bool
	// Bypass lists full method names never checked, such as
	// "/grpc.health.v1.Health/Check"; "/pkg.Service/*" matches a whole
	// service.
	Bypass []string
	// Principal names the caller (default DefaultPrincipal: the auth
	// interceptor's WithPrincipal, else a verified TLS client
	// certificate's subject). It must not trust caller-written metadata.
	Principal func(ctx context.Context) string
	// MessageCost, if set, prices each message a stream receives; it is
	// charged (under the same layers) after the message arrives, and a
	// refusal fails that RecvMsg with the refusal's status. A cost of 0
	// is free; a negative one fails the RecvMsg with INTERNAL. Without it a stream is checked once, at its start.
	MessageCost func(ctx context.Context, fullMethod string, msg any) int64
	// MethodLabel maps a full method name to the metrics' method label
	// (default: the name itself). Set it if the server has an
	// UnknownServiceHandler, whose callers choose the names.
	MethodLabel func(fullMethod string) string
	// Slots, if set, limits how many calls run at once across the
	// cluster: the slots of a policy with algorithm: concurrency
	// (inflight.Cluster; docs/concurrency.md). A slot is taken after the
	// Layers admitted the call (rate first, then concurrency), waiting in
	// its key's bounded queue up to the limiter's MaxWait and the call's
	// deadline; the handler runs under the slot's context, and the slot
	// is released when the handler returns or panics (for a stream: when
	// the stream ends). A refusal is RESOURCE_EXHAUSTED with RetryInfo.
	// Close the ClusterLimiter after the server.
	Slots *inflight.ClusterLimiter
	// SlotsKey names the call's key under the Slots policy, as a Layer's
	// Key does (nil: the policy's one budget, client.Key{}); a nil result
	// runs the call without a slot.
	SlotsKey KeyFunc
	// MaxCachedLimiters bounds the interceptors' index of limiters by
	// policy and key (client.LimiterIndex; default
	// client.DefaultLimiterIndexSize, 65536).
	MaxCachedLimiters int
}

// Interceptor holds the unary and stream server interceptors of one
// Config, and their metrics: it is a prometheus.Collector.
type Interceptor struct {
	cfg      Config
	exact    map[string]bool
	services []string // "/pkg.Service/" prefixes from Bypass
	index    *client.LimiterIndex
	metrics  *prometheus.CounterVec
	// Config.Slots: calls running under a slot, and waiting for one.
	slotsInFlight, slotsQueued *prometheus.GaugeVec
}

// New checks cfg and returns its interceptors.
func New(cfg Config) (*Interceptor, error) {
	if cfg.Client == nil {
		return nil, errors.New("grpclimit: Config.Client is nil")
	}
	if len(cfg.Layers) == 0 && cfg.Slots == nil {
		return nil, errors.New("grpclimit: Config.Layers is empty and Config.Slots is nil: nothing to limit")
	}
	if cfg.SlotsKey != nil && cfg.Slots == nil {
		return nil, errors.New("grpclimit: Config.SlotsKey without Config.Slots")
	}
	for i, l := range cfg.Layers {
		if l.Policy == "" {
			return nil, fmt.Errorf("grpclimit: layer %d has no policy", i)
		}
	}
	cfg.Layers = append([]Layer(nil), cfg.Layers...)
	if cfg.Cost == nil {
		cfg.Cost = ConstCost(1)
	}
	if cfg.Principal == nil {
		cfg.Principal = DefaultPrincipal
	}
	if cfg.MethodLabel == nil {
		cfg.MethodLabel = func(m string) string { return m }
	}
	if cfg.MaxCachedLimiters <= 0 {
		cfg.MaxCachedLimiters = client.DefaultLimiterIndexSize
	}
	g := &Interceptor{cfg: cfg, exact: map[string]bool{}, index: client.NewLimiterIndex(cfg.Client, cfg.MaxCachedLimiters)}
	for _, m := range cfg.Bypass {
		if svc, ok := strings.CutSuffix(m, "/*"); ok {
			g.services = append(g.services, svc+"/")
		} else {
			g.exact[m] = true
		}
	}
	g.metrics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "ration", Subsystem: "grpc_server", Name: "decisions_total",
		Help: "Calls checked by the ration gRPC interceptors, by policy, method and outcome (allowed, limited, shadow, unavailable).",
	}, []string{"policy", "method", "outcome"})
	g.slotsInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ration", Subsystem: "grpc_server", Name: "concurrency_in_flight",
		Help: "Calls running under a slot of the cluster-wide concurrency policy (Config.Slots), by policy."}, []string{"policy"})
	g.slotsQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ration", Subsystem: "grpc_server", Name: "concurrency_queued",
		Help: "Calls waiting for a slot of the cluster-wide concurrency policy (Config.Slots), by policy."}, []string{"policy"})
	return g, nil
}

// Describe implements prometheus.Collector.
func (g *Interceptor) Describe(ch chan<- *prometheus.Desc) {
	g.metrics.Describe(ch)
	g.slotsInFlight.Describe(ch)
	g.slotsQueued.Describe(ch)
}

// Collect implements prometheus.Collector.
func (g *Interceptor) Collect(ch chan<- prometheus.Metric) {
	g.metrics.Collect(ch)
	g.slotsInFlight.Collect(ch)
	g.slotsQueued.Collect(ch)
}

func (g *Interceptor) bypassed(fullMethod string) bool {
	if g.exact[fullMethod] {
		return true
	}
	for _, p := range g.services {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

// UnaryServerInterceptor checks each call before its handler runs.
func (g *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if g.bypassed(info.FullMethod) {
			return handler(ctx, req)
		}
		cost := g.cfg.Cost(ctx, info.FullMethod)
		var settle *settleInto
		if g.cfg.SettleAfter {
			settle = new(settleInto)
		}
		if err := g.checkInto(ctx, info.FullMethod, cost, settle); err != nil {
			return nil, err
		}
		if settle != nil {
			s := client.NewReservedSettlement(cost, settle.rs, settle.lims...)
			ctx = context.WithValue(ctx, settleKey{}, s)
			defer s.Finish() // what AddCost measured, if the handler did not Settle
		}
		var resp any
		var err error
		if serr := g.slotted(ctx, info.FullMethod, func(ctx context.Context) { resp, err = handler(ctx, req) }); serr != nil {
			return nil, serr
		}
		return resp, err
	}
}

// StreamServerInterceptor checks each stream once, when it starts, at
// Config.Cost; with Config.MessageCost each received message is checked
// too.
func (g *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if g.bypassed(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		cost := g.cfg.Cost(ctx, info.FullMethod)
		var settle *settleInto
		if g.cfg.SettleAfter {
			settle = new(settleInto)
		}
		if err := g.checkInto(ctx, info.FullMethod, cost, settle); err != nil {
			return err
		}
		if settle != nil {
			s := client.NewReservedSettlement(cost, settle.rs, settle.lims...)
			ss = &slotStream{ServerStream: ss, ctx: context.WithValue(ctx, settleKey{}, s)}
			ctx = ss.Context()
			defer s.Finish() // what AddCost measured, if the handler did not Settle
		}
		if g.cfg.MessageCost != nil {
			ss = &meteredStream{ServerStream: ss, g: g, method: info.FullMethod}
		}
		var err error
		if serr := g.slotted(ctx, info.FullMethod, func(slotCtx context.Context) {
			if slotCtx != ctx {
				ss = &slotStream{ServerStream: ss, ctx: slotCtx}
			}
			err = handler(srv, ss)
		}); serr != nil {
			return serr
		}
		return err
	}
}

type meteredStream struct {
	grpc.ServerStream
	g      *Interceptor
	method string
}

func (s *meteredStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx := s.Context()
	return s.g.check(ctx, s.method, s.g.cfg.MessageCost(ctx, s.method, m))
}

// check charges cost under every layer that applies, and returns the
// refusal's status error, or nil.
func (g *Interceptor) check(ctx context.Context, fullMethod string, cost int64) error {
	return g.checkInto(ctx, fullMethod, cost, nil)
}

// settleInto receives what an admitted call was charged under: the
// reservations of its layers and its shadow layers' limiters.
type settleInto struct {
	rs   []*client.Reservation
	lims []*client.Limiter
}

// checkInto is check; if settle is not nil, the layers are reserved
// (client.Client.ReserveAll, so that a lower measured cost refunds) and
// settle receives the reservations and the shadow layers' limiters.
func (g *Interceptor) checkInto(ctx context.Context, fullMethod string, cost int64, settle *settleInto) error {
	if cost < 0 {
		return rpcerr.Errorf(codes.Internal, "rate limiter: the cost function priced %s at %d; a cost must not be negative", fullMethod, cost)
	}
	if cost == 0 {
		return nil
	}
	principal := g.cfg.Principal(ctx)
	var lims, shadowLims []*client.Limiter
	var policies, shadowPolicies []string
	for _, l := range g.cfg.Layers {
		key := client.Key{}
		if l.Key != nil {
			if key = l.Key(ctx, fullMethod, principal); key == nil {
				continue
			}
		}
		if l.Shadow {
			shadowLims = append(shadowLims, g.limiter(l.Policy, key))
			shadowPolicies = append(shadowPolicies, l.Policy)
			continue
		}
		lims = append(lims, g.limiter(l.Policy, key))
		policies = append(policies, l.Policy)
	}
	method := g.cfg.MethodLabel(fullMethod)
	if len(lims) > 0 {
		// Each layer's own decision: the refusing layer is named
		// exactly, and every layer's shadow outcome is seen.
		var dbuf [8]client.Decision
		decs := dbuf[:]
		if len(lims) > len(dbuf) {
			decs = make([]client.Decision, len(lims))
		}
		decs = decs[:len(lims)]
		var refusing int
		if settle != nil {
			settle.rs = make([]*client.Reservation, len(lims))
			refusing = g.cfg.Client.ReserveAll(cost, client.DefaultReservationHold, lims, settle.rs, decs)
		} else {
			refusing = g.cfg.Client.AllowAllDetail(cost, lims, decs)
		}
		if refusing < 0 {
			for i, p := range policies {
				g.metrics.WithLabelValues(p, method, outcome(decs[i])).Inc()
			}
		} else {
			// The layers before the refusing one admitted: count only
			// their shadow policies' would-be refusals.
			for i, d := range decs[:refusing] {
				if d.Shadow {
					g.metrics.WithLabelValues(policies[i], method, "shadow").Inc()
				}
			}
			d := decs[refusing]
			g.metrics.WithLabelValues(policies[refusing], method, outcome(d)).Inc()
			return refusal(d, policies[refusing], cost)
		}
	}
	// Shadow layers see only calls the others admitted, and never refuse.
	for i, l := range shadowLims {
		o := "shadow"
		if d := l.AllowN(cost); d.Allowed && !d.Shadow {
			o = "allowed"
		}
		g.metrics.WithLabelValues(shadowPolicies[i], method, o).Inc()
	}
	if settle != nil {
		settle.lims = shadowLims
	}
	return nil
}

type settleKey struct{}

// ErrNoSettlement is Settle's error for a context with no settlement: the
// interceptor did not admit the call or stream with Config.SettleAfter on
// (or it cost nothing).
var ErrNoSettlement = errors.New("grpclimit: no settlement in this call's context (Config.SettleAfter off, or not admitted by the interceptor)")

// Settle charges an admitted call's or stream's measured cost, actual, under
// every layer that admitted it by its estimate (Config.Cost, with
// Config.SettleAfter on): what the estimate missed is charged after the
// fact, never refused; a lower actual refunds the difference. Call it
// from the handler with the call's (or stream's) context; it takes effect
// once (client.Settlement.Settle's errors).
func Settle(ctx context.Context, actual int64) error {
	s, ok := ctx.Value(settleKey{}).(*client.Settlement)
	if !ok {
		return ErrNoSettlement
	}
	return s.Settle(actual)
}

// AddCost adds n (>= 0) to an admitted call's measured cost, under
// Config.SettleAfter: a streaming handler calls it as it goes (per
// message, per chunk of tokens), and the sum is settled as Settle would
// when the handler returns, unless the handler called Settle itself.
// Errors: ErrNoSettlement, client.ErrInvalidCost for a negative n,
// client.ErrAlreadySettled after the settlement.
func AddCost(ctx context.Context, n int64) error {
	s, ok := ctx.Value(settleKey{}).(*client.Settlement)
	if !ok {
		return ErrNoSettlement
	}
	return s.Add(n)
}

func outcome(d client.Decision) string {
	switch {
	case d.Allowed && d.Shadow:
		return "shadow"
	case d.Allowed:
		return "allowed"
	case d.Reason == client.NoLease || d.Reason == client.Unavailable:
		return "unavailable"
	}
	return "limited"
}

// limiter returns the client's limiter for policy and key, from the
// bounded index: Client.Limiter takes the client's lock.
func (g *Interceptor) limiter(policy string, key client.Key) *client.Limiter {
	return g.index.Limiter(policy, key)
}
