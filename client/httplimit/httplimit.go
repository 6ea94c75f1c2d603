package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/inflight"
)

// Layer is one policy a request must pass.
type Layer struct {
	// Policy is the cluster policy's name.
	Policy string
	// Key builds the policy's key from the request and its caller; it must
	// give every key attribute the policy names. Default: ByCaller.
	Key func(r *http.Request, id Identity) (client.Key, error)
	// Rate and Burst are the policy's rate (tokens per second) and
	// burst, for the RateLimit-Policy field (q = Burst, w = Burst/Rate
	// seconds rounded up, the time an empty bucket takes to refill) and
	// the near-limit metric. Both zero (the default): the cluster's, as
	// the client last read them (client.Client.Policy; with ACLs the
	// client's token needs the policy-read right), so a policy changed by
	// the operator changes the fields within Config.PolicyRefresh; until
	// the first read, or for a policy the cluster lacks, RateLimit-Policy
	// is left out. Set them only to override what the cluster states.
	Rate  float64
	Burst int64

	fromCluster bool // Rate and Burst are read from the cluster
}

// withTerms is l with the policy's rate and burst as the cluster states
// them when l names none (Layer.Rate).
func (m *Middleware) withTerms(l Layer) Layer {
	if !l.fromCluster {
		return l
	}
	if info, ok := m.cfg.Client.Policy(l.Policy); ok && info.Algorithm == "token-bucket" {
		l.Rate, l.Burst = info.Rate, info.Burst
	}
	return l
}

// Config configures a Middleware.
type Config struct {
	// Client admits from the cluster's leases. Required.
	Client *client.Client
	// Layers are the policies a request must pass, all or none, charged in
	// order (Client.AllowAllDetail): e.g. per tenant and route, then per
	// tenant, then global. A request refused by a later layer is refunded
	// to the earlier ones. Required unless InFlight is set.
	Layers []Layer
	// Identity says who a request is charged to. Default:
	// Principal("tenant"), the authenticated principal the application's
	// authentication middleware stored with WithPrincipal.
	Identity KeyFunc
	// Route names a request's route pattern, for costs, keys and metric
	// labels. It must return a bounded set of patterns, never the raw
	// path. Default: r.Pattern (set by http.ServeMux for a handler it
	// routed to; see MuxRoute for a limiter wrapped around a mux).
	Route func(*http.Request) string
	// Cost is what a request costs. Default: Cost(1).
	Cost CostFunc
	// AllowList holds predicates for requests that are never limited nor
	// counted (health checks, internal callers): PathIs, PeerIn, or any
	// function that looks only at what the caller cannot forge.
	AllowList []func(*http.Request) bool
	// InFlight, if set, also limits how many of a caller's requests run at
	// once on this replica, acquired (waiting in its queue) before the
	// layers are charged and released when the handler returns or panics.
	InFlight *inflight.Limiter
	// InFlightKey names a request's in-flight key. Default: the caller
	// (Identity.Key).
	InFlightKey func(r *http.Request, id Identity) (string, error)
	// Slots, if set, limits how many requests run at once across the
	// cluster: the slots of a policy with algorithm: concurrency
	// (inflight.Cluster; docs/concurrency.md). A slot is taken after the
	// Layers admitted the request (rate first, then concurrency), waiting
	// in its key's bounded queue up to the limiter's MaxWait and the
	// request's deadline; the handler runs under the slot's context, and
	// the slot is released when the handler returns or panics. A refusal
	// is 429 with ProblemConcurrencyExceeded. Close the ClusterLimiter
	// after the server.
	Slots *inflight.ClusterLimiter
	// SlotsKey builds a request's key under the Slots policy, as a
	// Layer's Key does. Default: ByCaller.
	SlotsKey func(r *http.Request, id Identity) (client.Key, error)
	// Shadow runs the middleware as a dry run: it decides as usual and
	// counts what it would refuse, but lets every request through and
	// adds no RateLimit or Retry-After fields. Admitted requests are still
	// charged. (A policy with shadow: true in the cluster is always
	// observe-only, whatever this says.)
	Shadow bool
	// SuccessHeaders adds RateLimit-Policy and RateLimit to admitted
	// responses, describing the last layer (its own decision). Default
	// off. Order the layers so the last one is the
	// caller's own budget if you turn this on: a shared layer's remaining
	// quota says how busy everyone else is.
	SuccessHeaders bool
	// Registerer receives the middleware's metrics (see the package
	// documentation); nil registers none. Middlewares sharing a registry
	// share the series.
	Registerer prometheus.Registerer
	// MaxCachedLimiters bounds the middleware's index of limiters by
	// policy and key (client.LimiterIndex; default
	// client.DefaultLimiterIndexSize, 65536).
	MaxCachedLimiters int
	// SettleAfter makes Cost an estimate: an admitted request's context
	// carries a settlement the handler calls with the measured cost
	// (Settle; an LLM proxy passing usage.total_tokens), or adds it up
	// as a streamed response goes (AddCost, settled when the handler
	// returns). Every layer is charged what the estimate missed, after
	// the fact and never refused (client.Limiter.Charge: a debt where a
	// bucket lacks it, docs/design.md §4.1), or refunded what it saved
	// (the estimate is a client.Reservation). A handler that does
	// neither keeps the estimate. Default off (no per-request
	// allocation).
	SettleAfter bool
	// OnError writes the response when a key cannot be made (Identity,
	// Layer.Key or InFlightKey failed) or Cost returned a negative cost
	// (err wraps ErrInvalidCost). Default: 500 with a problem+json body of
	// type ProblemKeyUnavailable (ProblemCostInvalid for a cost), the error
	// itself not disclosed.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// Middleware limits HTTP requests with ration. Build one with New and wrap
// handlers with Wrap; it is safe for concurrent use.
type Middleware struct {
	cfg     Config
	index   *client.LimiterIndex
	metrics *metrics
}

// New validates cfg and returns a Middleware.
func New(cfg Config) (*Middleware, error) {
	if cfg.Client == nil {
		return nil, errors.New("httplimit: Config.Client is nil")
	}
	if len(cfg.Layers) == 0 && cfg.InFlight == nil && cfg.Slots == nil {
		return nil, errors.New("httplimit: no Layers, no InFlight and no Slots: nothing to limit")
	}
	if cfg.SlotsKey != nil && cfg.Slots == nil {
		return nil, errors.New("httplimit: Config.SlotsKey without Config.Slots")
	}
	if cfg.SlotsKey == nil {
		cfg.SlotsKey = ByCaller()
	}
	cfg.Layers = append([]Layer(nil), cfg.Layers...)
	for i := range cfg.Layers {
		l := &cfg.Layers[i]
		if l.Policy == "" {
			return nil, fmt.Errorf("httplimit: layer %d has no Policy", i)
		}
		if l.Rate < 0 || l.Burst < 0 {
			return nil, fmt.Errorf("httplimit: layer %d (%s): negative Rate or Burst", i, l.Policy)
		}
		if l.Key == nil {
			l.Key = ByCaller()
		}
		if l.Rate == 0 && l.Burst == 0 {
			l.fromCluster = true
			cfg.Client.Policy(l.Policy) // start reading the cluster's policies
		}
	}
	if cfg.Identity == nil {
		cfg.Identity = Principal("tenant")
	}
	if cfg.Route == nil {
		cfg.Route = func(r *http.Request) string { return r.Pattern }
	}
	if cfg.Cost == nil {
		cfg.Cost = Cost(1)
	}
	if cfg.InFlightKey == nil {
		cfg.InFlightKey = func(_ *http.Request, id Identity) (string, error) { return canonical(id.Key), nil }
	}
	if cfg.MaxCachedLimiters <= 0 {
		cfg.MaxCachedLimiters = client.DefaultLimiterIndexSize
	}
	if cfg.OnError == nil {
		cfg.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
			if errors.Is(err, ErrInvalidCost) {
				writeProblem(w, http.StatusInternalServerError, problem{Type: ProblemCostInvalid, Title: "Rate limit cost invalid",
					Detail: "The server could not price this request."})
				return
			}
			writeProblem(w, http.StatusInternalServerError, problem{Type: ProblemKeyUnavailable, Title: "Rate limit key unavailable",
				Detail: "The server could not tell whose quota this request is charged to."})
		}
	}
	m := &Middleware{cfg: cfg, index: client.NewLimiterIndex(cfg.Client, cfg.MaxCachedLimiters)}
	var err error
	if m.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return m, nil
}

// Wrap returns next behind the limiter. It panics if next is nil, as
// http.Handle does.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	if next == nil {
		panic("httplimit: Wrap(nil): no handler to limit")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// outcome labels of ration_http_requests_total.
const (
	outAllowed           = "allowed"
	outLimited           = "limited"
	outShadowLimited     = "shadow_limited"
	outUnavailable       = "unavailable"
	outShadowUnavailable = "shadow_unavailable"
	outConcurrency       = "concurrency_limited"
	outShadowConcurrency = "shadow_concurrency_limited"
	outCanceled          = "canceled"
)

// inflightPolicy is the policy label of the in-flight limiter's outcomes.
const inflightPolicy = "inflight"

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	for _, bypass := range m.cfg.AllowList {
		if bypass(r) {
			next.ServeHTTP(w, r)
			return
		}
	}
	route := m.cfg.Route(r)
	cost := m.cfg.Cost(r, route)
	if cost < 0 {
		// A cost function's bug (Content-Length -1 of a request of unknown
		// length, say): refused, never admitted free.
		m.cfg.OnError(w, r, fmt.Errorf("%w: the cost function priced %s %s (route %q) at %d", ErrInvalidCost, r.Method, r.URL.Path, route, cost))
		return
	}
	key, err := m.cfg.Identity(r)
	if err != nil {
		m.cfg.OnError(w, r, err)
		return
	}
	id := Identity{Key: key, Route: route}

	var buf [8]*client.Limiter
	lims, next, err := m.keyed(r, id, cost, buf[:0], next)
	if err != nil {
		m.cfg.OnError(w, r, err)
		return
	}

	if m.cfg.InFlight != nil {
		ik, err := m.cfg.InFlightKey(r, id)
		if err != nil {
			m.cfg.OnError(w, r, err)
			return
		}
		release, err := m.cfg.InFlight.Acquire(r.Context(), ik)
		switch {
		case err == nil:
			defer func() {
				release()
				if p := recover(); p != nil {
					panic(p)
				}
			}()
		case m.cfg.Shadow:
			m.metrics.count(inflightPolicy, route, outShadowConcurrency)
		default:
			m.metrics.count(inflightPolicy, route, outConcurrency)
			m.rejectConcurrency(w)
			return
		}
	}

	if len(lims) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	m.charge(w, r, next, route, cost, lims)
}

// keyed makes every key a request needs before anything is charged, so a
// key error spends nothing: it appends each layer's limiter to lims (none
// for a free request), and puts next behind its slot when Config.Slots is
// set.
func (m *Middleware) keyed(r *http.Request, id Identity, cost int64, lims []*client.Limiter, next http.Handler) ([]*client.Limiter, http.Handler, error) {
	if cost >= 1 {
		for _, layer := range m.cfg.Layers {
			k, err := layer.Key(r, id)
			if err != nil {
				return nil, nil, err
			}
			lims = append(lims, m.index.Limiter(layer.Policy, k))
		}
	}
	if m.cfg.Slots != nil {
		k, err := m.cfg.SlotsKey(r, id)
		if err != nil {
			return nil, nil, err
		}
		next = m.slotted(id.Route, k, next)
	}
	return lims, next, nil
}

// charge charges cost under every layer (lims[i] is layer i's limiter),
// then serves the request or answers the refusal.
func (m *Middleware) charge(w http.ResponseWriter, r *http.Request, next http.Handler, route string, cost int64, lims []*client.Limiter) {
	// Each layer's own decision: the refusing layer is named exactly, and
	// a shadow policy's would-be refusal is seen in whichever layer.
	var dbuf [8]client.Decision
	decs := dbuf[:]
	if len(lims) > len(dbuf) {
		decs = make([]client.Decision, len(lims))
	}
	decs = decs[:len(lims)]
	var s *client.Settlement
	var i int
	if m.cfg.SettleAfter {
		// Reservations, so that a lower measured cost refunds.
		rs := make([]*client.Reservation, len(lims))
		i = m.cfg.Client.ReserveAll(cost, client.DefaultReservationHold, lims, rs, decs)
		s = client.NewReservedSettlement(cost, rs)
	} else {
		i = m.cfg.Client.AllowAllDetail(cost, lims, decs)
	}
	if i < 0 {
		m.admitted(w, route, decs, lims)
		if s != nil {
			r = r.WithContext(context.WithValue(r.Context(), settleKey{}, s))
			defer s.Finish() // what AddCost measured, if the handler did not Settle
		}
		next.ServeHTTP(w, r)
		return
	}
	// The layers before the refusing one admitted: count their shadow
	// policies' would-be refusals.
	for j, dj := range decs[:i] {
		if dj.Shadow {
			m.metrics.count(m.cfg.Layers[j].Policy, route, outShadowLimited)
		}
	}
	d := decs[i]
	policy := m.cfg.Layers[i].Policy
	unavailable := d.Reason == client.NoLease || d.Reason == client.Unavailable
	switch {
	case m.cfg.Shadow && unavailable:
		m.metrics.count(policy, route, outShadowUnavailable)
		next.ServeHTTP(w, r)
	case m.cfg.Shadow:
		m.metrics.count(policy, route, outShadowLimited)
		next.ServeHTTP(w, r)
	case unavailable:
		m.metrics.count(policy, route, outUnavailable)
		m.rejectUnavailable(w, d)
	default:
		m.metrics.count(policy, route, outLimited)
		if !m.rejectWindow(w, m.cfg.Layers[i], lims[i], cost, d) {
			m.rejectQuota(w, m.withTerms(m.cfg.Layers[i]), cost, d)
		}
	}
}

// admitted counts an admission, once per layer (shadow_limited for a
// layer whose shadow policy would have refused), and adds the success
// headers if asked to. decs holds every layer's decision.
func (m *Middleware) admitted(w http.ResponseWriter, route string, decs []client.Decision, lims []*client.Limiter) {
	for i, layer := range m.cfg.Layers {
		if decs[i].Shadow {
			m.metrics.count(layer.Policy, route, outShadowLimited)
			continue
		}
		m.metrics.count(layer.Policy, route, outAllowed)
	}
	last := len(m.cfg.Layers) - 1
	layer, d := m.withTerms(m.cfg.Layers[last]), decs[last]
	if d.Reason == client.Allowed && layer.Burst > 0 && d.RemainingMilli < layer.Burst*1000/5 {
		m.metrics.nearLimit(layer.Policy, route)
	}
	if m.cfg.SuccessHeaders && !m.cfg.Shadow && !d.Shadow && d.Reason == client.Allowed {
		if windowSuccess(w.Header(), layer.Policy, lims[last]) {
			return
		}
		setPolicyField(w.Header(), layer)
		w.Header().Set("RateLimit", rateLimitField(layer.Policy, d.RemainingMilli, refillSeconds(layer, d.RemainingMilli), true))
	}
}

type settleKey struct{}

// ErrNoSettlement is Settle's error for a context with no settlement: the
// middleware did not admit the request with Config.SettleAfter on.
var ErrNoSettlement = errors.New("httplimit: no settlement in this request's context (Config.SettleAfter off, or not admitted by the middleware)")

// Settle charges an admitted request's measured cost, actual, under
// every layer that admitted it by its estimate (Config.Cost, with
// Config.SettleAfter on): what the estimate missed is charged after the
// fact, never refused (client.Limiter.Charge: a debt where a bucket lacks
// it, docs/design.md §4.1); a lower actual refunds the difference. Call it from
// the handler once the cost is known, with the request's context; it
// takes effect once (client.Settlement.Settle's errors).
func Settle(ctx context.Context, actual int64) error {
	s, ok := ctx.Value(settleKey{}).(*client.Settlement)
	if !ok {
		return ErrNoSettlement
	}
	return s.Settle(actual)
}

// AddCost adds n (>= 0) to an admitted request's measured cost, under
// Config.SettleAfter: a streaming handler calls it as it goes (an LLM
// proxy per chunk of tokens), and the sum is settled as Settle would when
// the handler returns, unless the handler called Settle itself. Errors:
// ErrNoSettlement, client.ErrInvalidCost for a negative n,
// client.ErrAlreadySettled after the settlement.
func AddCost(ctx context.Context, n int64) error {
	s, ok := ctx.Value(settleKey{}).(*client.Settlement)
	if !ok {
		return ErrNoSettlement
	}
	return s.Add(n)
}
