// Package clusterbench holds the coordinator benchmarks: key-renewals per
// second, grant latency, memory per active lease and Raft log bytes per
// renewal, each on a real three-node in-process cluster (real Raft on disk,
// real gRPC on loopback). See BENCHMARKS.md for the commands and figures.
package clusterbench
