package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/ration-dev/ration/api"
)

// Health of the servers. The leader runs autopilot (coordinator/
// autopilot.go) and reports what it computed in its Status answer (the
// autopilot field): each server's health, with the reason when not
// healthy, and the failure tolerance. rationctl status shows that
// (fromLeader). A leader older than the field reports none; rationctl then
// judges health itself, as Consul's autopilot would, and says so (judge):
// it asks every server of the Raft configuration for its own Status (its
// term, leader, last contact with the leader, last log index) and calls a
// voter healthy when it answers, is alive in gossip, follows the same
// leader in the same term, heard from the leader within
// --max-last-contact and its log is within --max-trailing-logs of the
// leader's. The failure tolerance is how many voters can fail before the
// quorum is lost: healthy voters minus the quorum (0 without a leader).
// The servers are asked from where rationctl runs: one it cannot reach
// counts as unhealthy even if its peers reach it.

// Where a clusterHealth comes from.
const (
	healthFromLeader = "leader"    // the leader's autopilot
	healthFromCLI    = "rationctl" // judge, for a leader without autopilot state
)

// Defaults of the status thresholds (Consul's autopilot uses 200ms and
// 250 entries with its own Raft timing; ration's heartbeats are every
// 100ms, so 500ms is five missed).
const (
	defaultMaxLastContact  = 500 * time.Millisecond
	defaultMaxTrailingLogs = 1000
	// perServerTimeout bounds asking one server, within --timeout.
	perServerTimeout = 2 * time.Second
)

// dialServer connects to a server's gRPC address for the fan-out; tests
// replace it to reach canned servers.
var dialServer = func(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, dialOptions(grpc.WithTransportCredentials(transportCreds()))...)
}

// serverHealth is one server's answer and verdict.
type serverHealth struct {
	resp    *api.StatusResponse // nil when it did not answer
	healthy bool
	problem string // why not healthy; empty when healthy
	// ap is the leader's autopilot view of the server (source
	// healthFromLeader; nil if the leader's state does not list it).
	ap *api.AutopilotServer
}

// clusterHealth is the verdict over the configuration.
type clusterHealth struct {
	servers          map[string]*serverHealth // by ID
	voters, quorum   int
	healthyVoters    int
	failureTolerance int
	maxLastContact   time.Duration
	maxTrailingLogs  uint64
	source           string              // healthFromLeader or healthFromCLI
	autopilot        *api.AutopilotState // the leader's, when source is healthFromLeader
}

// health is the leader's autopilot verdict when its answer carries one,
// else rationctl's own (judge).
func health(first *api.StatusResponse, answers map[string]*api.StatusResponse, maxLastContact time.Duration, maxTrailing uint64) *clusterHealth {
	if l := answers[first.GetLeader()]; l != nil && l.GetAutopilot() != nil {
		return fromLeader(first, answers, l.GetAutopilot())
	}
	return judge(first, answers, maxLastContact, maxTrailing)
}

// fromLeader is the health the leader's autopilot computed, over the
// configuration as first lists it.
func fromLeader(first *api.StatusResponse, answers map[string]*api.StatusResponse, ap *api.AutopilotState) *clusterHealth {
	h := &clusterHealth{servers: map[string]*serverHealth{}, source: healthFromLeader, autopilot: ap,
		failureTolerance: int(ap.GetFailureTolerance()), maxLastContact: time.Duration(ap.GetMaxLastContactNanos()),
		maxTrailingLogs: ap.GetMaxTrailingLogs()}
	byID := map[string]*api.AutopilotServer{}
	for _, s := range ap.GetServers() {
		byID[s.GetId()] = s
		if s.GetRaftState() == "leader" || s.GetRaftState() == "voter" {
			h.voters++
			if s.GetHealthy() {
				h.healthyVoters++
			}
		}
	}
	for _, s := range first.GetServers() {
		sh := &serverHealth{resp: answers[s.GetId()], ap: byID[s.GetId()]}
		switch {
		case sh.ap == nil:
			sh.problem = "not in the leader's autopilot state yet"
		case sh.ap.GetHealthy():
			sh.healthy = true
		default:
			sh.problem = sh.ap.GetReason()
		}
		h.servers[s.GetId()] = sh
	}
	h.quorum = h.voters/2 + 1
	return h
}

// askAll gets every server's own Status: the answering server's is first
// (already in hand, over conn), the others over their gRPC addresses, in
// parallel. A server its advertised address does not reach from here
// (a container's service name, seen from the host) is then looked for
// among also, the addresses rationctl was given (--servers): an answer
// there counts if the server answering is the one missing.
func askAll(ctx context.Context, first *api.StatusResponse, also []string) map[string]*api.StatusResponse {
	out := map[string]*api.StatusResponse{first.GetAnsweredBy(): first}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range first.GetServers() {
		if s.GetId() == first.GetAnsweredBy() || s.GetGrpcAddress() == "" {
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			conn, err := dialServer(addr)
			if err != nil {
				return
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, perServerTimeout)
			defer cancel()
			r, err := api.NewAdminClient(conn).Status(cctx, &api.StatusRequest{})
			if err != nil || r.GetAnsweredBy() != id {
				return
			}
			mu.Lock()
			out[id] = r
			mu.Unlock()
		}(s.GetId(), s.GetGrpcAddress())
	}
	wg.Wait()
	missing := map[string]bool{}
	for _, s := range first.GetServers() {
		if out[s.GetId()] == nil {
			missing[s.GetId()] = true
		}
	}
	if len(missing) == 0 {
		return out
	}
	for _, addr := range also {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			conn, err := dialServer(addr)
			if err != nil {
				return
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, perServerTimeout)
			defer cancel()
			r, err := api.NewAdminClient(conn).Status(cctx, &api.StatusRequest{})
			if err != nil || !missing[r.GetAnsweredBy()] {
				return
			}
			mu.Lock()
			if out[r.GetAnsweredBy()] == nil {
				out[r.GetAnsweredBy()] = r
			}
			mu.Unlock()
		}(addr)
	}
	wg.Wait()
	return out
}

// judge applies the autopilot rules to the answers.
func judge(first *api.StatusResponse, answers map[string]*api.StatusResponse, maxLastContact time.Duration, maxTrailing uint64) *clusterHealth {
	h := &clusterHealth{servers: map[string]*serverHealth{}, maxLastContact: maxLastContact, maxTrailingLogs: maxTrailing, source: healthFromCLI}
	leaderID := first.GetLeader()
	leader := answers[leaderID]
	for _, s := range first.GetServers() {
		sh := &serverHealth{resp: answers[s.GetId()]}
		h.servers[s.GetId()] = sh
		if s.GetSuffrage() == "voter" {
			h.voters++
		}
		r := sh.resp
		switch {
		case leaderID == "":
			sh.problem = "no leader"
		case leader == nil:
			sh.problem = "the leader did not answer"
		case !s.GetHealthy():
			sh.problem = "not alive in gossip"
		case r == nil && s.GetGrpcAddress() == "":
			sh.problem = "no gRPC address in gossip"
		case r == nil:
			sh.problem = "did not answer"
		case r.GetLastLogIndex() == 0:
			sh.problem = "does not report its Raft figures (older server)"
		case r.GetLeader() != leaderID:
			sh.problem = fmt.Sprintf("follows %q", r.GetLeader())
		case r.GetTerm() != leader.GetTerm():
			sh.problem = fmt.Sprintf("term %d, the leader's %d", r.GetTerm(), leader.GetTerm())
		case r.GetLastContactNanos() < 0:
			sh.problem = "never heard from the leader"
		case time.Duration(r.GetLastContactNanos()) > maxLastContact:
			sh.problem = fmt.Sprintf("last contact %v ago, over %v", nanosDuration(r.GetLastContactNanos()), maxLastContact)
		case leader.GetLastLogIndex() > r.GetLastLogIndex() && leader.GetLastLogIndex()-r.GetLastLogIndex() > maxTrailing:
			sh.problem = fmt.Sprintf("%d entries behind the leader, over %d", leader.GetLastLogIndex()-r.GetLastLogIndex(), maxTrailing)
		default:
			sh.healthy = true
		}
		if sh.healthy && s.GetSuffrage() == "voter" {
			h.healthyVoters++
		}
	}
	h.quorum = h.voters/2 + 1
	if leaderID != "" && h.healthyVoters > h.quorum {
		h.failureTolerance = h.healthyVoters - h.quorum
	}
	return h
}
