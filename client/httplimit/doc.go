// Package httplimit puts ration in front of an HTTP API: net/http
// middleware that charges each request to one or more cluster policies,
// all or none, and answers refusals the way clients can act on.
//
//	mw, err := httplimit.New(httplimit.Config{
//		Client: c, // a *client.Client
//		Layers: []httplimit.Layer{
//			{Policy: "api-tenant-route", Key: httplimit.ByCallerAndRoute("route")},
//			{Policy: "api-tenant"}, // Key defaults to ByCaller
//		},
//		Route:     httplimit.MuxRoute(mux),
//		Cost:      httplimit.CostByRoute(map[string]int64{"POST /v1/reports": 5}, 1),
//		AllowList: []func(*http.Request) bool{httplimit.PathIs("/healthz")},
//	})
//	handler := authenticate(mw.Wrap(mux)) // authenticate calls httplimit.WithPrincipal
//
// docs/api-gateway.md explains the choices: keys, layers, costs, shadow
// rollout, fail-open or closed, and what clients should do with a 429 or
// 503.
//
// # Who is charged
//
// Config.Identity names the caller. The default is the authenticated
// principal that the application's own authentication middleware stored
// in the request context with WithPrincipal: nothing the caller sends
// (a tenant header, X-Forwarded-For) changes it. ClientIP keys by address
// instead, for unauthenticated routes, and only as an explicit choice; it
// honours X-Forwarded-For only from trusted proxies (the rightmost
// untrusted hop). Each Layer then builds its policy's key from the caller
// and the route pattern: ByCaller, ByCallerAndRoute, Global, or your own.
// Config.AllowList predicates exempt requests (health checks, internal
// callers) from every layer.
//
// # Admission
//
// The layers are charged in order with client.Client.AllowAllDetail: a
// request is admitted only if every layer admits it, and a layer's refusal
// refunds the layers charged before it; the refusal names the refusing
// layer's policy. Admission is local, from the replica's
// leases (package client). The limiters are looked up per policy and key
// in a bounded client.LimiterIndex (Config.MaxCachedLimiters).
//
// # Responses
//
// A quota refusal (client.Limited, client.ExceedsCapacity) is 429 Too
// Many Requests with:
//
//	Retry-After: 3                                    whole seconds, rounded up, plus 0 or 1 s of jitter
//	RateLimit-Policy: "api-tenant-route";q=10;w=2     the refusing policy: quota (burst), window (burst/rate)
//	RateLimit: "api-tenant-route";r=0;t=2             remaining tokens on this replica; seconds until the cost fits
//	Cache-Control: no-store
//	Content-Type: application/problem+json
//
//	{"type":"https://ration.dev/problems/quota-exceeded","title":"Quota exceeded","status":429,
//	 "detail":"The quota of policy \"api-tenant-route\" does not cover this request's cost of 5 now; retry after 2 s.",
//	 "policy":"api-tenant-route"}
//
// RateLimit-Policy and RateLimit follow draft-ietf-httpapi-ratelimit-headers
// as RFC 9651 Structured Field Lists. Retry-After is never earlier than t,
// which is never earlier than the limiter's RetryAfter. The body (RFC 9457)
// names the refusing policy and nothing of any other caller's state. A
// cost more than a policy's burst gets no Retry-After: it can never pass.
// RateLimit-Policy states the policy's rate and burst as the cluster
// holds them (read by the client, client.Client.Policy), or as
// Layer.Rate and Layer.Burst override them; it is left out until the
// client has read them.
//
// When the limiter cannot decide (client.NoLease: the first lease has not
// arrived; client.Unavailable: the lease ran out and the policy is
// fail-closed) the answer is 503 Service Unavailable with Retry-After and
// problem type ProblemCapacityReduced: the service is degraded, the
// caller's quota is not spent. A fail-open policy admits from its local
// fallback rate instead, and never gives 503.
//
// A policy with shadow: true never refuses, and the middleware adds no
// headers for it; Config.Shadow makes the middleware itself a dry run.
// Either way would-be refusals are counted. Admitted responses carry
// RateLimit fields only with Config.SuccessHeaders.
//
// Config.InFlight adds a per-caller concurrency limit (package inflight),
// acquired before the layers are charged and released when the handler
// returns or panics; refusals are 429 with ProblemConcurrencyExceeded.
//
// Config.Slots adds a cluster-wide concurrency limit: the slots of a
// policy with algorithm: concurrency, through an inflight.ClusterLimiter
// (docs/concurrency.md §8). Rate first, then concurrency: a slot is taken
// after the layers admitted the request, keyed by Config.SlotsKey
// (default ByCaller), waiting in the key's bounded queue up to the
// limiter's MaxWait and never past the request's deadline less its
// DeadlineMargin. The handler runs under the slot's context (it ends at
// max_duration, or cancel_grace before the slot lease's deadline, and when
// the request's context ends), and the slot is released however the
// handler ends, a panic included (inflight.ClusterLimiter.RunKey, the path
// every concurrency layer shares). A busy key is 429 with
// ProblemConcurrencyExceeded and Retry-After; a key the cluster refuses is
// 503 ProblemCapacityReduced.
//
//	slots := inflight.Cluster(c, "reports-inflight", "tenant", inflight.Config{MaxQueue: 32, MaxWait: 2 * time.Second})
//	defer slots.Close() // after the server
//	mw, err := httplimit.New(httplimit.Config{Client: c, Layers: layers, Slots: slots})
//
// # Metrics
//
// With Config.Registerer:
//
//	ration_http_requests_total{policy,route,outcome}   counter: outcome is allowed, limited, unavailable,
//	                                                   shadow_limited, shadow_unavailable, concurrency_limited
//	                                                   or shadow_concurrency_limited (policy "inflight", or
//	                                                   the Slots policy, which also counts allowed, canceled
//	                                                   and unavailable)
//	ration_http_near_limit_total{policy,route}         counter: admissions leaving the last layer below 20% of its Burst
//	ration_http_concurrency_in_flight{policy}          gauge: requests running under a Slots slot
//	ration_http_concurrency_queued{policy}             gauge: requests waiting for a Slots slot
//
// route is the route pattern, never the raw path nor any key value. An
// admitted request counts once per layer (shadow_limited for a layer whose
// shadow policy would have refused); a refused one counts under the
// refusing policy, plus shadow_limited for each earlier layer whose shadow
// policy would have refused. Allow-listed requests are not
// counted. The client's own Collector (client.NewCollector) has the
// per-policy decisions and lease state.
//
// # Limitations
//
// The near-limit count and the success headers describe the last layer
// only. The remaining count r is this replica's lease, not the
// cluster's total.
package httplimit
