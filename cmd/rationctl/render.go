package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// Rendering of the admin responses: a table for people, JSON for scripts.
// The JSON field names are part of the CLI's interface: quantities keep the
// API's exact integer units, named in the field (_milli, _nanos).

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// milli formats milli-units as a decimal with 3 places: 1500 -> "1.500".
func milli(v int64) string { return string(policy.FormatMilli(nil, v)) }

// nanosDuration formats nanoseconds as a duration rounded to milliseconds.
func nanosDuration(ns int64) string {
	return time.Duration(ns).Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// statusJSON is `rationctl status --json`.
type statusJSON struct {
	Leader           string `json:"leader"`
	Term             uint64 `json:"term"`
	CommitIndex      uint64 `json:"commit_index"`
	AppliedIndex     uint64 `json:"applied_index"`
	AnsweredBy       string `json:"answered_by"`
	ClusterTimeNanos int64  `json:"cluster_time_nanos"`
	Policies         uint64 `json:"policies"`
	Keys             uint64 `json:"keys"`
	Leases           uint64 `json:"leases"`
	Voters           int    `json:"voters"`
	Quorum           int    `json:"quorum"`
	HealthyVoters    int    `json:"healthy_voters"`
	FailureTolerance int    `json:"failure_tolerance"`
	// HealthSource: "leader" (its autopilot computed the health) or
	// "rationctl" (an older leader reports none: judged here).
	HealthSource string         `json:"health_source"`
	Autopilot    *autopilotJSON `json:"autopilot,omitempty"`
	Servers      []serverJSON   `json:"servers"`
	// WindowClock: window time against the answering server's wall clock
	// (only when leased windows are in use).
	WindowClock *windowClockJSON `json:"window_clock,omitempty"`
}

// autopilotJSON is the leader's autopilot settings and verdict.
type autopilotJSON struct {
	Healthy                bool   `json:"healthy"`
	FailureTolerance       int32  `json:"failure_tolerance"`
	StabilizationTimeNanos int64  `json:"stabilization_time_nanos"`
	MaxLastContactNanos    int64  `json:"max_last_contact_nanos"`
	MaxTrailingLogs        uint64 `json:"max_trailing_logs"`
	ReapTimeoutNanos       int64  `json:"reap_timeout_nanos"`
	UpdatedUnixNanos       int64  `json:"updated_unix_nanos"`
}

// autopilotServerJSON is one server as the leader's autopilot saw it.
type autopilotServerJSON struct {
	RaftState            string `json:"raft_state"`
	NodeStatus           string `json:"node_status"`
	Healthy              bool   `json:"healthy"`
	Reason               string `json:"reason"`
	LastContactNanos     int64  `json:"last_contact_nanos"`
	LastIndex            uint64 `json:"last_index"`
	LastTerm             uint64 `json:"last_term"`
	StableSinceUnixNanos int64  `json:"stable_since_unix_nanos"`
}

type windowClockJSON struct {
	LagNanos      int64 `json:"lag_nanos"`
	SlewLeftNanos int64 `json:"slew_left_nanos"`
}

// serverJSON is one server in statusJSON. address is the Raft address (the
// one in the Raft configuration); grpc_address what rationctl and clients
// dial, empty when gossip does not know the server; healthy is alive in
// gossip. The rest is the server's own answer (answered false: none; then
// last_contact_nanos is -1) and the autopilot verdict (autopilot.go).
type serverJSON struct {
	ID               string `json:"id"`
	Address          string `json:"address"`
	GRPCAddress      string `json:"grpc_address"`
	Suffrage         string `json:"suffrage"`
	State            string `json:"state"`
	Healthy          bool   `json:"healthy"`
	Answered         bool   `json:"answered"`
	Term             uint64 `json:"term"`
	LastContactNanos int64  `json:"last_contact_nanos"`
	LastLogIndex     uint64 `json:"last_log_index"`
	Version          string `json:"version"`
	Revision         string `json:"revision"`
	AutopilotHealthy bool   `json:"autopilot_healthy"`
	Problem          string `json:"problem"`
	// Autopilot: the leader's view of the server (health_source "leader").
	Autopilot *autopilotServerJSON `json:"autopilot,omitempty"`
}

func writeStatus(w io.Writer, r *api.StatusResponse, h *clusterHealth, asJSON bool) error {
	server := func(s *api.ServerStatus) serverJSON {
		out := serverJSON{
			ID: s.GetId(), Address: s.GetRaftAddress(), GRPCAddress: s.GetGrpcAddress(),
			Suffrage: s.GetSuffrage(), State: s.GetState(), Healthy: s.GetHealthy(), LastContactNanos: -1,
		}
		if sh := h.servers[s.GetId()]; sh != nil {
			out.AutopilotHealthy, out.Problem = sh.healthy, sh.problem
			if a := sh.ap; a != nil {
				out.Autopilot = &autopilotServerJSON{RaftState: a.GetRaftState(), NodeStatus: a.GetNodeStatus(), Healthy: a.GetHealthy(),
					Reason: a.GetReason(), LastContactNanos: a.GetLastContactNanos(), LastIndex: a.GetLastIndex(), LastTerm: a.GetLastTerm(),
					StableSinceUnixNanos: a.GetStableSinceUnixNanos()}
			}
			if sh.resp != nil {
				out.Answered, out.Term = true, sh.resp.GetTerm()
				out.LastContactNanos, out.LastLogIndex = sh.resp.GetLastContactNanos(), sh.resp.GetLastLogIndex()
				out.Version, out.Revision = sh.resp.GetVersion(), sh.resp.GetRevision()
			}
		}
		return out
	}
	if asJSON {
		out := statusJSON{
			Leader: r.GetLeader(), Term: r.GetTerm(), CommitIndex: r.GetCommitIndex(), AppliedIndex: r.GetAppliedIndex(),
			AnsweredBy: r.GetAnsweredBy(), ClusterTimeNanos: r.GetClusterTimeNanos(),
			Policies: r.GetPolicies(), Keys: r.GetKeys(), Leases: r.GetLeases(),
			Voters: h.voters, Quorum: h.quorum, HealthyVoters: h.healthyVoters, FailureTolerance: h.failureTolerance,
			HealthSource: h.source, Servers: []serverJSON{},
		}
		if a := h.autopilot; a != nil {
			out.Autopilot = &autopilotJSON{Healthy: a.GetHealthy(), FailureTolerance: a.GetFailureTolerance(),
				StabilizationTimeNanos: a.GetStabilizationTimeNanos(), MaxLastContactNanos: a.GetMaxLastContactNanos(),
				MaxTrailingLogs: a.GetMaxTrailingLogs(), ReapTimeoutNanos: a.GetReapTimeoutNanos(), UpdatedUnixNanos: a.GetUpdatedUnixNanos()}
		}
		for _, s := range r.GetServers() {
			out.Servers = append(out.Servers, server(s))
		}
		if r.GetWindowClockSet() {
			out.WindowClock = &windowClockJSON{LagNanos: r.GetWindowLagNanos(), SlewLeftNanos: r.GetWindowSlewLeftNanos()}
		}
		return writeJSON(w, out)
	}
	bw := bufio.NewWriter(w)
	tw := newTable(bw)
	leader := r.GetLeader()
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(tw, "Leader:\t%s\n", leader)
	fmt.Fprintf(tw, "Term:\t%d\n", r.GetTerm())
	fmt.Fprintf(tw, "Commit index:\t%d\n", r.GetCommitIndex())
	fmt.Fprintf(tw, "Applied index:\t%d\n", r.GetAppliedIndex())
	fmt.Fprintf(tw, "Cluster time:\t%s\n", nanosDuration(r.GetClusterTimeNanos()))
	fmt.Fprintf(tw, "Policies:\t%d\n", r.GetPolicies())
	fmt.Fprintf(tw, "Keys:\t%d\n", r.GetKeys())
	fmt.Fprintf(tw, "Leases:\t%d\n", r.GetLeases())
	fmt.Fprintf(tw, "Answered by:\t%s\n", r.GetAnsweredBy())
	if h.source == healthFromLeader {
		fmt.Fprintf(tw, "Failure tolerance:\t%d (%d of %d voters healthy, quorum %d; computed by the leader's autopilot)\n",
			h.failureTolerance, h.healthyVoters, h.voters, h.quorum)
		a := h.autopilot
		fmt.Fprintf(tw, "Autopilot:\tnew servers vote after %v healthy; failed servers removed after %v\n",
			time.Duration(a.GetStabilizationTimeNanos()), time.Duration(a.GetReapTimeoutNanos()))
	} else {
		fmt.Fprintf(tw, "Failure tolerance:\t%d (%d of %d voters healthy, quorum %d; judged by rationctl: the leader reports no autopilot state)\n",
			h.failureTolerance, h.healthyVoters, h.voters, h.quorum)
	}
	if r.GetWindowClockSet() {
		fmt.Fprintf(tw, "Window time:\t%s\n", windowLag(r.GetWindowLagNanos(), r.GetWindowSlewLeftNanos()))
	}
	tw.Flush()
	fmt.Fprintln(bw)
	tw = newTable(bw)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tGRPC ADDRESS\tSUFFRAGE\tSTATE\tGOSSIP\tLAST CONTACT\tLAST INDEX\tVERSION\tHEALTHY")
	for _, s := range r.GetServers() {
		sj := server(s)
		contact, index, ver := "-", "-", "-"
		if sj.Answered {
			index, ver = fmt.Sprint(sj.LastLogIndex), serverVersion(sj.Version)
			switch {
			case sj.LastContactNanos == 0 && sj.State == "leader":
				contact = "(leader)"
			case sj.LastContactNanos >= 0:
				contact = time.Duration(sj.LastContactNanos).Round(100 * time.Microsecond).String()
			default:
				contact = "never"
			}
		}
		gossip := "alive"
		if !sj.Healthy {
			gossip = "not alive"
		}
		health := "yes"
		switch {
		case !sj.AutopilotHealthy:
			health = "no: " + sj.Problem
		case sj.Suffrage == "nonvoter" && sj.Autopilot != nil && sj.Autopilot.RaftState == "non-voter":
			health = "yes (a voter once stable)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sj.ID, sj.Address, orDash(sj.GRPCAddress),
			sj.Suffrage, sj.State, gossip, contact, index, ver, health)
	}
	tw.Flush()
	return bw.Flush()
}

// memberJSON is one member of `rationctl members --json`.
type memberJSON struct {
	Name    string            `json:"name"`
	Address string            `json:"address"`
	Status  string            `json:"status"`
	Meta    map[string]string `json:"meta"`
}

func writeMembers(w io.Writer, r *api.MembersResponse, asJSON bool) error {
	if asJSON {
		out := struct {
			Members []memberJSON `json:"members"`
		}{Members: []memberJSON{}}
		for _, m := range r.GetMembers() {
			meta := m.GetMeta()
			if meta == nil {
				meta = map[string]string{}
			}
			out.Members = append(out.Members, memberJSON{Name: m.GetName(), Address: m.GetAddress(), Status: m.GetStatus(), Meta: meta})
		}
		return writeJSON(w, out)
	}
	bw := bufio.NewWriter(w)
	tw := newTable(bw)
	fmt.Fprintln(tw, "NAME\tGOSSIP ADDRESS\tSTATUS\tRAFT ADDRESS\tGRPC ADDRESS")
	for _, m := range r.GetMembers() {
		meta := m.GetMeta()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetName(), m.GetAddress(), m.GetStatus(), orDash(meta["raft"]), orDash(meta["grpc"]))
	}
	tw.Flush()
	return bw.Flush()
}

// policyJSON is a stored policy in `rationctl policy get|list --json`: its
// name and usage, and its settings as fields (spec), in the API's exact
// units. A policy this binary cannot read (a newer server's field) has no
// spec but unreadable, saying why, and its stored policy file in yaml.
type policyJSON struct {
	Name       string          `json:"name"`
	Keys       uint64          `json:"keys"`
	Leases     uint64          `json:"leases"`
	Spec       *policySpecJSON `json:"spec,omitempty"`
	Unreadable string          `json:"unreadable,omitempty"`
	YAML       string          `json:"yaml,omitempty"`
}

// policySpecJSON is every setting of a policy, defaults included (as the
// cluster stores it: api.PolicySpec). The rate is rate_milli_per_sec
// milli-tokens per second, or per rate_period_nanos when that is not 0
// (rate: 1/m is 1000 per 60s).
type policySpecJSON struct {
	Algorithm               string           `json:"algorithm"`
	Key                     []string         `json:"key"`
	Charge                  string           `json:"charge"`
	RateMilliPerSec         int64            `json:"rate_milli_per_sec"`
	RatePeriodNanos         int64            `json:"rate_period_nanos"`
	BurstMilli              int64            `json:"burst_milli"`
	StartFull               bool             `json:"start_full"`
	LimitMilli              int64            `json:"limit_milli"`
	WindowNanos             int64            `json:"window_nanos"`
	LeaseDurationNanos      int64            `json:"lease_duration_nanos"`
	RenewAfterNanos         int64            `json:"renew_after_nanos"`
	DriftPPM                int64            `json:"drift_ppm"`
	DefaultWeight           int64            `json:"default_weight"`
	ClientWeights           map[string]int64 `json:"client_weights"`
	Failure                 string           `json:"failure"`
	FallbackRateMilliPerSec int64            `json:"fallback_rate_milli_per_sec"`
	Shadow                  bool             `json:"shadow"`
	MaxKeys                 int64            `json:"max_keys"`
	MaxLeasesPerKey         int64            `json:"max_leases_per_key"`
	// MaxKeysPerValue is the cap in force for a token bucket (the default
	// filled in; docs/policy.md#max_keys_per_value-token-bucket), 0 for
	// other algorithms.
	MaxKeysPerValue int64 `json:"max_keys_per_value"`
}

func toPolicyJSON(info *api.PolicyInfo) policyJSON {
	out := policyJSON{Name: info.GetName(), Keys: info.GetKeys(), Leases: info.GetLeases()}
	f, err := policy.Parse(strings.NewReader(info.GetYaml()))
	if err == nil && len(f.Policies) != 1 {
		err = fmt.Errorf("the stored policy file has %d policies, want 1", len(f.Policies))
	}
	if err != nil {
		out.Unreadable = strings.ReplaceAll(err.Error(), "\n", "; ")
		out.YAML = info.GetYaml()
		return out
	}
	out.Spec = specOf(f.Policies[0])
	return out
}

// specOf is every setting of p, as policy get --json prints it.
func specOf(p policy.Policy) *policySpecJSON {
	spec := &policySpecJSON{
		Algorithm: string(p.Algorithm), Key: append([]string{}, p.Key...), Charge: string(p.Charge),
		RateMilliPerSec: p.RateMilliPerSec, RatePeriodNanos: p.RatePeriodNanos, BurstMilli: p.BurstMilli,
		StartFull: p.StartFull, LimitMilli: p.LimitMilli, WindowNanos: p.WindowNanos,
		LeaseDurationNanos: p.LeaseDurationNanos, RenewAfterNanos: p.RenewAfterNanos, DriftPPM: p.DriftPPM,
		DefaultWeight: p.DefaultWeight, ClientWeights: map[string]int64{}, Failure: string(p.Failure),
		FallbackRateMilliPerSec: p.FallbackRateMilliPerSec, Shadow: p.Shadow,
		MaxKeys: p.MaxKeys, MaxLeasesPerKey: p.MaxLeasesPerKey,
	}
	if p.Algorithm == policy.TokenBucket {
		spec.MaxKeysPerValue = p.KeysPerValue()
	}
	for k, v := range p.ClientWeights {
		spec.ClientWeights[k] = v
	}
	return spec
}

func writePolicies(w io.Writer, r *api.ListPoliciesResponse, asJSON bool) error {
	if asJSON {
		out := struct {
			Policies []policyJSON `json:"policies"`
		}{Policies: []policyJSON{}}
		for _, p := range r.GetPolicies() {
			out.Policies = append(out.Policies, toPolicyJSON(p))
		}
		return writeJSON(w, out)
	}
	bw := bufio.NewWriter(w)
	if len(r.GetPolicies()) == 0 {
		fmt.Fprintln(bw, "No policies. Apply some with: rationctl policy apply -f FILE")
		return bw.Flush()
	}
	tw := newTable(bw)
	fmt.Fprintln(tw, "NAME\tALGORITHM\tRATE/S\tBURST\tKEY\tLEASE\tKEYS\tLEASES")
	for _, info := range r.GetPolicies() {
		alg, rate, burst, key, dur := "?", "?", "?", "?", "?"
		// The stored YAML is canonical; if this binary cannot read it
		// (a newer server's field), the columns show "?".
		if f, err := policy.Parse(strings.NewReader(info.GetYaml())); err == nil && len(f.Policies) == 1 {
			p := f.Policies[0]
			alg, rate, burst, dur = string(p.Algorithm), "-", "-", "-"
			if p.Algorithm == policy.TokenBucket {
				rate, burst = policy.FormatUnits(p.RateMilliPerSec), policy.FormatUnits(p.BurstMilli)
				if p.RatePeriodNanos != 0 {
					rate += "/" + policy.FormatRatePeriod(p.RatePeriodNanos)
				}
				dur = time.Duration(p.LeaseDurationNanos).String()
			}
			key = "[" + strings.Join(p.Key, ", ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", info.GetName(), alg, rate, burst, key, dur, info.GetKeys(), info.GetLeases())
	}
	tw.Flush()
	return bw.Flush()
}

// writePolicy prints one policy as a policy file that can be applied
// again, with its usage as a comment.
func writePolicy(w io.Writer, p *api.PolicyInfo, asJSON bool) error {
	if asJSON {
		return writeJSON(w, toPolicyJSON(p))
	}
	_, err := fmt.Fprintf(w, "# policy %s: %d keys, %d leases\n%s", p.GetName(), p.GetKeys(), p.GetLeases(), p.GetYaml())
	return err
}

// leaseJSON and keyJSON are `rationctl leases --json`.
type leaseJSON struct {
	Policy              string `json:"policy"`
	Key                 string `json:"key"`
	ClientID            string `json:"client_id"`
	Incarnation         uint64 `json:"incarnation"`
	LeaseID             uint64 `json:"lease_id"`
	RateMilliPerSec     int64  `json:"rate_milli_per_sec"`
	CapMilli            int64  `json:"cap_milli"`
	StartMilli          int64  `json:"start_milli"`
	HeldRateMilliPerSec int64  `json:"held_rate_milli_per_sec"`
	HeldCapMilli        int64  `json:"held_cap_milli"`
	ExpiresNanos        int64  `json:"expires_nanos"`
	ExpiresInNanos      int64  `json:"expires_in_nanos"`
}

type keyJSON struct {
	Policy          string `json:"policy"`
	Key             string `json:"key"`
	PoolMilli       int64  `json:"pool_milli"`
	RateMilliPerSec int64  `json:"rate_milli_per_sec"`
	CapacityMilli   int64  `json:"capacity_milli"`
	// A leased window key's current window and count (render_window.go).
	WindowStartUnixNanos int64 `json:"window_start_unix_nanos,omitempty"`
	WindowEndUnixNanos   int64 `json:"window_end_unix_nanos,omitempty"`
	WindowCountMilli     int64 `json:"window_count_milli,omitempty"`
	WindowLimitMilli     int64 `json:"window_limit_milli,omitempty"`
}

type leasesJSON struct {
	ClusterTimeNanos int64       `json:"cluster_time_nanos"`
	Leases           []leaseJSON `json:"leases"`
	Keys             []keyJSON   `json:"keys"`
}

func writeLeases(w io.Writer, r *api.ListLeasesResponse, asJSON bool) error {
	if asJSON {
		out := leasesJSON{ClusterTimeNanos: r.GetClusterTimeNanos(), Leases: []leaseJSON{}, Keys: []keyJSON{}}
		for _, l := range r.GetLeases() {
			out.Leases = append(out.Leases, leaseJSON{
				Policy: l.GetPolicy(), Key: l.GetKey(), ClientID: l.GetClientId(), Incarnation: l.GetIncarnation(),
				LeaseID: l.GetLeaseId(), RateMilliPerSec: l.GetRateMilliPerSec(), CapMilli: l.GetCapMilli(),
				StartMilli: l.GetStartMilli(), HeldRateMilliPerSec: l.GetHeldRateMilliPerSec(), HeldCapMilli: l.GetHeldCapMilli(),
				ExpiresNanos: l.GetExpiresNanos(), ExpiresInNanos: l.GetExpiresInNanos(),
			})
		}
		for _, k := range r.GetKeys() {
			out.Keys = append(out.Keys, keyJSON{
				Policy: k.GetPolicy(), Key: k.GetKey(), PoolMilli: k.GetPoolMilli(),
				RateMilliPerSec: k.GetRateMilliPerSec(), CapacityMilli: k.GetCapacityMilli(),
				WindowStartUnixNanos: k.GetWindowStartUnixNanos(), WindowEndUnixNanos: k.GetWindowEndUnixNanos(),
				WindowCountMilli: k.GetWindowCountMilli(), WindowLimitMilli: k.GetWindowLimitMilli(),
			})
		}
		return writeJSON(w, out)
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "Leases at cluster time %s (tokens and tokens/s):\n", nanosDuration(r.GetClusterTimeNanos()))
	if len(r.GetLeases()) == 0 {
		fmt.Fprintln(bw, "  none")
	} else {
		tw := newTable(bw)
		fmt.Fprintln(tw, "POLICY\tKEY\tCLIENT\tINCARNATION\tLEASE ID\tRATE/S\tCAP\tGRANTED\tHELD RATE/S\tHELD CAP\tEXPIRES IN")
		for _, l := range r.GetLeases() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
				l.GetPolicy(), orDash(l.GetKey()), l.GetClientId(), l.GetIncarnation(), l.GetLeaseId(),
				milli(l.GetRateMilliPerSec()), milli(l.GetCapMilli()), milli(l.GetStartMilli()),
				milli(l.GetHeldRateMilliPerSec()), milli(l.GetHeldCapMilli()), expiresIn(l.GetExpiresInNanos()))
		}
		tw.Flush()
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Key pools (tokens not leased to anyone):")
	if len(r.GetKeys()) == 0 {
		fmt.Fprintln(bw, "  none")
	} else {
		tw := newTable(bw)
		fmt.Fprintln(tw, "POLICY\tKEY\tPOOL\tRATE/S\tBURST\tLEASES")
		for _, k := range r.GetKeys() {
			if k.GetWindowLimitMilli() > 0 {
				continue // writeWindowCounts
			}
			n := 0
			for _, l := range r.GetLeases() {
				if l.GetPolicy() == k.GetPolicy() && l.GetKey() == k.GetKey() {
					n++
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", k.GetPolicy(), orDash(k.GetKey()),
				milli(k.GetPoolMilli()), milli(k.GetRateMilliPerSec()), milli(k.GetCapacityMilli()), n)
		}
		tw.Flush()
	}
	writeWindowCounts(bw, r)
	return bw.Flush()
}

// expiresIn is a lease's remaining time, or "expired" once past.
func expiresIn(ns int64) string {
	if ns <= 0 {
		return "expired"
	}
	return nanosDuration(ns)
}
