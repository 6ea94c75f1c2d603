// Package testcluster runs an in-process ration cluster for tests: N
// coordinator.Servers, each with its own data directory under t.TempDir(),
// on loopback ports, with real Raft on real disk, real gossip and real gRPC.
//
//	c := testcluster.New(t, 3, testcluster.WithPolicies(yaml))
//	leader := c.WaitForLeader(t)
//	resp, err := c.Client(0).Acquire(ctx, req)
//	c.Kill(c.Index(leader))
//	c.WaitForLeader(t)
//
// # Design
//
// Ports. Raft and gRPC listeners are opened by the helper on 127.0.0.1:0
// and handed to the server through coordinator.Config.Listen, so there is
// no window in which another process can take the port. Memberlist binds
// its own TCP and UDP sockets on the gossip address, so for gossip the
// helper probes a port where both are free and, if the server still fails
// to start (the port was taken in between), retries on a fresh one. A
// restarted server keeps its ID, data directory and all three addresses:
// the helper re-listens on the same ports, retrying while they are busy.
//
// Waiting. Every helper that waits polls a condition every pollInterval
// until a deadline (DefaultWait, generous for a loaded 2-core machine) and
// fails the test with the last reason the condition gave. Nothing sleeps
// to synchronise.
//
// Logs. Every server logs through t.Log (a slog handler per server), so a
// failing test shows the cluster's story and a passing one stays quiet.
// Logging stops when the test ends: servers' background goroutines can
// outlive it by a moment and t.Log would panic. LogWatch counts records by
// message, for events the API does not expose.
//
// Cleanup. New registers one cleanup that closes the helper's gRPC
// connections and shuts every live server down gracefully; data
// directories are removed after that.
package testcluster
