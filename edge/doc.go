// Package edge is `rationd edge`: a stateless process that embeds the
// client package and holds leases on behalf of callers that do not, and
// answers them over gRPC (Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService, and ration's own
// ration.v1.Admission/Check) and HTTP (POST /v1/check, /metrics, /livez,
// /readyz).
//
// An edge is an ordinary lease holder: its decisions are the client's
// (Limiter.AllowN and Client.AllowAllDetail, the same hot path as an
// embedded library), so the cluster-wide bound B + r·W holds across every
// edge and every embedded client together. It needs no admin rights: it
// only acquires, renews and releases leases, and reads the policy list
// (Admin.ListPolicies) to learn rates and bursts for the RateLimit headers
// and to report Envoy rules whose policy the cluster lacks. The operator
// applies the policies (rationctl policy import --envoy FILE | rationctl
// policy apply -f -). See docs/envoy.md.
//
// # Design
//
// What an Edge owns: one client.Client (its leases, renewals and
// evictions, under Config.ClientID, with Config.PressureKeys defaulting to
// DefaultPressureKeys), a bounded map from policy and key to that
// client's limiters (Edge.limiter: at most 65536 entries, dropped all at
// once when full; the client keeps the limiters themselves), the Envoy
// configuration ShouldRateLimit answers from (SetEnvoy replaces it), and
// a watcher that reads the cluster's policy list every
// Config.PolicyRefresh (5s by default). It keeps nothing on disk: a
// restarted edge is a new incarnation of its client ID, and the cluster
// releases its predecessor's leases when it first speaks.
//
// Invariants, and why:
//
//   - Every decision is the embedded client's (Limiter.AllowN, and
//     Client.AllowAllDetail for calls charged all or none), from the
//     edge's own leases. An edge is one more lease holder, so the bound
//     B + r·W holds over every edge and every embedded client together.
//   - A Check with all_or_none (its items must share one cost) and a
//     ShouldRateLimit whose enforced descriptors share one cost are
//     charged all or none; descriptors of different costs are charged in
//     order, and a refusal stops the later ones without refunding the
//     earlier, as envoyproxy/ratelimit charges them. A Check without
//     all_or_none decides each item alone. Shadow rules are charged only
//     when the request is admitted, and never refuse.
//   - Keys reach the client in their wire form (Client.WireLimiter): a
//     Check key's values as they came, a descriptor's values mapped by
//     client.WireKeyValue, so an edge and a library limiting the same
//     bytes charge the same budget.
//   - The edge cannot serve a concurrency policy (a call has no release):
//     such a call is refused FAILED_PRECONDITION, never admitted.
//   - Its health follows Ready: NOT_SERVING until it has read the
//     cluster's policy list, and again for good once the cluster refused
//     its client ID as an older incarnation (another live process uses the
//     same ID; every edge needs its own).
//   - The policy list only informs: rates and bursts for the RateLimit
//     headers, and warnings for Envoy rules whose policy the cluster lacks
//     or defines otherwise. The cluster's policy is what is enforced.
package edge
