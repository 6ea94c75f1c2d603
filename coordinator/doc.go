// Package coordinator is the rationd server: a Raft node whose replicated
// state machine (package fsm) holds the policies and the lease ledgers
// (package lease), with gossip membership, and the gRPC services clients,
// edges and rationctl call (Leases, Admin). New starts one; Config says
// how (DefaultConfig for production, TestConfig for tests).
//
// # Design
//
// What a Server owns:
//
//   - The Raft node (hashicorp/raft): its log and stable store
//     (raft-boltdb in DataDir/raft), its snapshot store (openSnapshotStore,
//     Config.SnapshotRetain) and its transport (transport.go). The FSM is
//     fsm.FSM; the server never changes replicated state except by
//     appending a command to the log.
//   - The cluster clock (clusterClock, leader.go): on the leader, the
//     cluster time stamped into every command (proposeAsync), continued
//     from the last committed cluster time at each takeover, counted on the
//     monotonic clock, and never going backwards within a term.
//   - The batcher (batcher.go): every Acquire, Renew and Release the leader
//     handles is queued and coalesced with the others into one
//     fsm.CmdLeaseBatch entry (at most Config.MaxBatchOps requests and
//     8 MiB), with at most 4 entries in flight.
//   - Forwarding (forward.go): a follower forwards each call to the
//     leader (at most two hops), waiting while there is no leader.
//   - The leader loop (leaderLoop, leader.go): a barrier and the clock
//     takeover (establish), then the periodic Expire entries
//     (Config.ExpireInterval), the window clock, feature switches and
//     membership reconciliation (reconcile, membership.go).
//   - Gossip membership (membership.go, memberlist): who is alive, each
//     server's addresses and features; it bootstraps a new cluster
//     (bootstrapConfig, every server a voter) and makes the Raft
//     configuration follow gossip (planReconcile decides; reconcile adds
//     newcomers as non-voters and rewrites moved servers' addresses).
//   - Autopilot on the leader (autopilot.go, hashicorp/raft-autopilot):
//     each server's health and the failure tolerance (Status RPC,
//     ration_autopilot_* metrics), promotion of a non-voter once healthy
//     for ServerStabilizationTime, and removal of the servers
//     planReconcile says are due (left, or dead longer than ReapTimeout).
//   - The online audit of the bound (audit.go), ACLs (acl.go) and the
//     server identity the built-in edge leases with on a cluster with
//     ACLs (serverid.go: a per-start secret whose digest is gossiped;
//     checked on the RPC side, so it has no feature switch), the lease
//     API's per-client and per-connection limits (limits.go), metrics
//     and stats.
//
// Invariants, and why:
//
//   - A client is answered only from committed, applied state: a lease
//     operation's answer is the fsm.OpResult of the entry that carried it
//     (batcher.apply waits for the Raft future). A grant nobody committed
//     could be granted again by the next leader.
//   - Only the leader stamps and appends, and only once its clock is ready
//     for the current term (clusterClock.readyLocked): a clock from before
//     the barrier or from an earlier term would make leases expire early,
//     and an early reclaim breaks the bound.
//   - Cluster time lags real time after a leader change (the election is
//     not counted), so reclaims come later, never earlier.
//   - Stamping and appending happen under one lock, so cluster time
//     increases in log order; the FSM takes the maximum anyway.
//   - A retried request (same client ID, incarnation and seq) gets the
//     answer recorded for it in the replicated state, never a second
//     grant: the FSM answers it from its client records.
//   - Membership changes never leave the alive servers without a quorum:
//     autopilot removes a dead or departed voter only when planReconcile
//     finds the remaining voters keep a quorum of alive servers (and at
//     most a minority of the voters per round).
//   - A server votes only once autopilot has seen it healthy for
//     ServerStabilizationTime, except the servers of a bootstrap.
//
// The request path end to end, from the client's Limiter to its bucket,
// is in docs/architecture.md; the protocol rules and their proofs in
// docs/design.md.
package coordinator
