// Package grpclimit limits a gRPC server's calls with ration: unary and
// stream server interceptors that admit each call locally from the
// replica's leases (client.Client), before the handler runs.
//
//	lim, err := grpclimit.New(grpclimit.Config{
//		Client: c, // a *client.Client
//		Layers: []grpclimit.Layer{
//			{Policy: "per-tenant", Key: grpclimit.PrincipalKey("tenant")},
//			{Policy: "global"},
//		},
//		Cost:   grpclimit.CostTable(map[string]int64{"/inventory.V1/BulkWrite": 10}, 1),
//		Bypass: []string{"/grpc.health.v1.Health/*"},
//	})
//	prometheus.MustRegister(lim)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(auth, lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(authStream, lim.StreamServerInterceptor()))
//
// # Who is calling
//
// The principal handed to each layer's KeyFunc comes from the context the
// application's auth interceptor returned (WithPrincipal), else from the
// subject of a TLS client certificate the handshake verified. Metadata the
// caller wrote is never read: an "x-tenant" header names whoever the
// caller wants to be, so it counts only once the application has checked
// it and said so with WithPrincipal. Chain the auth interceptor first.
//
// # Refusals
//
// Limited and ExceedsCapacity answer RESOURCE_EXHAUSTED with a
// google.rpc.QuotaFailure (violation subject: the policy's name; the
// description says the cost, never the budget's level or anyone else's
// state) and, for Limited, a google.rpc.RetryInfo whose delay is the
// limiter's RetryAfter rounded up to the millisecond. There is no
// RetryInfo when no wait admits the call: ExceedsCapacity, or a bucket
// that does not refill (RetryAfter lease.RetryNever). NoLease and Unavailable (a
// fail-closed policy without a usable lease) answer UNAVAILABLE with
// RetryInfo. client/retry's interceptor honours RetryInfo.
//
// A call costs Config.Cost (default 1); a cost of 0 is free and not
// checked, a negative cost (a pricing bug) fails the call with INTERNAL,
// and a cost above every policy's burst is RESOURCE_EXHAUSTED without
// RetryInfo. The first call on a new key may wait up to the client's
// FirstLeaseWait for its first lease. The Interceptor keeps every
// (policy, key) limiter it has used, as the Client does.
//
// # Shadow
//
// A policy configured shadow: true in the cluster never refuses once the
// client holds its lease; its would-be denials count as outcome "shadow".
// Before the first lease the client cannot know the policy is shadow, so
// such a call answers as NoLease would (UNAVAILABLE). Layer.Shadow makes a
// layer advisory whatever the policy: it is charged only for calls the
// other layers admitted, never refuses, and counts its would-be denials.
//
// # Streams
//
// A stream is checked once, when it starts, at Config.Cost: a refused
// stream ends at once with the refusal's status and the handler never
// runs. Set Config.MessageCost to charge each received message as well;
// a refused message fails its RecvMsg with the refusal's status (the
// message is dropped), which the handler usually returns.
//
// # Layers
//
// Layers are charged all or nothing (Client.AllowAllDetail): a call
// refused by one layer is refunded in the others. The refusal names the
// refusing layer's policy (the only QuotaFailure violation), and the
// metrics count it under that policy. An allowed call counts for each
// layer: "allowed", or "shadow" when that layer's policy is shadow in the
// cluster and would have refused. A refused call also counts "shadow" for
// each earlier layer whose shadow policy would have refused.
//
// # Concurrency
//
// Config.Slots adds a cluster-wide concurrency limit: the slots of a
// policy with algorithm: concurrency, through an inflight.ClusterLimiter
// (docs/concurrency.md §8). Rate first, then concurrency: a slot is taken
// after the layers admitted the call, keyed by Config.SlotsKey, waiting in
// the key's bounded queue up to the limiter's MaxWait and never past the
// call's deadline less its DeadlineMargin. The handler runs under the
// slot's context (the call's values and deadline, ended at max_duration or
// cancel_grace before the slot lease's deadline), and the slot is released
// however the handler ends: a return, a panic (chain a recovery
// interceptor outside this one), or a stream's end
// (inflight.ClusterLimiter.RunKey, the path every concurrency layer
// shares). A busy key answers RESOURCE_EXHAUSTED with a QuotaFailure
// naming the policy and a RetryInfo of 1 s; a key the cluster refuses,
// UNAVAILABLE; a call whose context ended while it waited, its context's
// status.
//
//	slots := inflight.Cluster(c, "calls-inflight", "tenant", inflight.Config{MaxQueue: 32, MaxWait: 2 * time.Second})
//	defer slots.Close() // after the server
//	lim, err := grpclimit.New(grpclimit.Config{Client: c, Layers: layers, Slots: slots, SlotsKey: grpclimit.PrincipalKey("tenant")})
//
// # Metrics
//
// The Interceptor is a prometheus.Collector of the series
//
//	ration_grpc_server_decisions_total{policy,method,outcome}
//	ration_grpc_server_concurrency_in_flight{policy}   calls running under a Slots slot
//	ration_grpc_server_concurrency_queued{policy}      calls waiting for one
//
// with outcome allowed, limited (Limited and ExceedsCapacity; for the
// Slots policy, a busy key), shadow (a shadow policy would have refused),
// unavailable (NoLease, Unavailable; a key the cluster refuses) or canceled
// (the call ended while it waited for a slot).
// Keys and principals are never labels. Calls on the Bypass list and free
// calls are not counted. client.NewCollector has the per-policy lease
// and decision series.
package grpclimit
