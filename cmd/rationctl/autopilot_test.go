package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestJudge: the autopilot rules, one broken at a time, and the failure
// tolerance they give.
func TestJudge(t *testing.T) {
	const ms = int64(time.Millisecond)
	// cluster is n voters (and nonvoters) s1..; s1 leads and answers.
	cluster := func(voters, nonvoters int) (*api.StatusResponse, map[string]*api.StatusResponse) {
		first := &api.StatusResponse{Leader: "s1", Term: 4, AnsweredBy: "s1", LastLogIndex: 500}
		answers := map[string]*api.StatusResponse{}
		for i := 1; i <= voters+nonvoters; i++ {
			id := fmt.Sprintf("s%d", i)
			suffrage := "voter"
			if i > voters {
				suffrage = "nonvoter"
			}
			first.Servers = append(first.Servers, &api.ServerStatus{Id: id, GrpcAddress: id + ":1", Suffrage: suffrage, Healthy: true})
			answers[id] = &api.StatusResponse{Leader: "s1", Term: 4, AnsweredBy: id, LastContactNanos: 20 * ms, LastLogIndex: 495}
		}
		answers["s1"] = first
		return first, answers
	}
	for _, c := range []struct {
		name      string
		voters    int
		nonvoters int
		breakIt   func(first *api.StatusResponse, a map[string]*api.StatusResponse)
		problem   string // s2's, "" for healthy
		tolerance int
	}{
		{"three healthy", 3, 0, nil, "", 1},
		{"five healthy", 5, 0, nil, "", 2},
		{"nonvoters do not count", 3, 2, nil, "", 1},
		{"one voter", 1, 0, nil, "", 0},
		{"last contact too old", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { a["s2"].LastContactNanos = 501 * ms },
			"last contact 501ms ago, over 500ms", 0},
		{"last contact at the bound", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { a["s2"].LastContactNanos = 500 * ms }, "", 1},
		{"never heard from the leader", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { a["s2"].LastContactNanos = -1 },
			"never heard from the leader", 0},
		{"trailing", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) {
			a["s2"].LastLogIndex = 1
			a["s1"].LastLogIndex = 1002
		},
			"1001 entries behind the leader, over 1000", 0},
		{"other term", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { a["s2"].Term = 3 }, "term 3, the leader's 4", 0},
		{"other leader", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { a["s2"].Leader = "s3" }, `follows "s3"`, 0},
		{"did not answer", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { delete(a, "s2") }, "did not answer", 0},
		{"dead in gossip", 3, 0, func(f *api.StatusResponse, _ map[string]*api.StatusResponse) { f.Servers[1].Healthy = false }, "not alive in gossip", 0},
		{"older server", 3, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) {
			a["s2"].LastLogIndex, a["s2"].LastContactNanos = 0, 0
		},
			"does not report its Raft figures (older server)", 0},
		{"two of five down", 5, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { delete(a, "s2"); delete(a, "s3") }, "did not answer", 0},
		{"one of five down", 5, 0, func(_ *api.StatusResponse, a map[string]*api.StatusResponse) { delete(a, "s2") }, "did not answer", 1},
		{"no leader", 3, 0, func(f *api.StatusResponse, _ map[string]*api.StatusResponse) { f.Leader = "" }, "no leader", 0},
	} {
		first, answers := cluster(c.voters, c.nonvoters)
		if c.breakIt != nil {
			c.breakIt(first, answers)
		}
		h := judge(first, answers, defaultMaxLastContact, defaultMaxTrailingLogs)
		if c.voters >= 2 {
			if got := h.servers["s2"].problem; got != c.problem || h.servers["s2"].healthy != (c.problem == "") {
				t.Errorf("%s: s2 problem %q healthy %v, want %q", c.name, got, h.servers["s2"].healthy, c.problem)
			}
		}
		if h.failureTolerance != c.tolerance || h.voters != c.voters || h.quorum != c.voters/2+1 {
			t.Errorf("%s: tolerance %d (voters %d, quorum %d, healthy %d), want %d", c.name, h.failureTolerance, h.voters, h.quorum, h.healthyVoters, c.tolerance)
		}
	}
}

// TestStatusFailureTolerance: rationctl status against a real in-process
// cluster shows what the leader's autopilot computed: 1 with three
// healthy voters and every server's last contact; 0 with one stopped,
// which is named unhealthy with the leader's reason; 1 again once it is
// back. (The reap timeout is long: the stopped server stays a voter.)
func TestStatusFailureTolerance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 3, testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.ReapTimeout = time.Hour }))
	c.WaitForStableLeader(t)
	var addrs []string
	for i := range c.Len() {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	// A generous --max-last-contact: heartbeats on a loaded machine.
	status := func(servers string) (statusJSON, string) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"--servers", servers, "status", "--json", "--max-last-contact", "5s"}, &stdout, &stderr)
		var st statusJSON
		if code != 0 {
			return st, fmt.Sprintf("exit %d: %s", code, stderr.String())
		}
		if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
			t.Fatalf("%v\n%s", err, stdout.String())
		}
		return st, stdout.String()
	}
	servers := strings.Join(addrs, ",")
	want := func(tolerance, healthy int, check func(st statusJSON) error) {
		t.Helper()
		c.WaitFor(t, testcluster.DefaultWait, func() error {
			st, out := status(servers)
			if st.FailureTolerance != tolerance || st.HealthyVoters != healthy || st.Voters != 3 || st.Quorum != 2 ||
				st.HealthSource != "leader" || st.Autopilot == nil || int(st.Autopilot.FailureTolerance) != tolerance {
				return fmt.Errorf("tolerance %d, %d healthy voters, want %d and %d:\n%s", st.FailureTolerance, st.HealthyVoters, tolerance, healthy, out)
			}
			if check != nil {
				return check(st)
			}
			return nil
		})
	}
	want(1, 3, func(st statusJSON) error {
		for _, s := range st.Servers {
			if !s.Answered || !s.AutopilotHealthy || s.LastLogIndex == 0 || s.Term != st.Term {
				return fmt.Errorf("server %+v", s)
			}
			if (s.State == "leader") != (s.LastContactNanos == 0) || s.LastContactNanos < 0 {
				return fmt.Errorf("last contact of %+v", s)
			}
			if a := s.Autopilot; a == nil || !a.Healthy || a.NodeStatus != "alive" || a.LastIndex == 0 || a.LastContactNanos < 0 {
				return fmt.Errorf("the leader's view of %+v: %+v", s, a)
			}
		}
		return nil
	})
	// The table shows it too.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--servers", servers, "--max-last-contact", "5s"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "Failure tolerance:  1 (3 of 3 voters healthy, quorum 2; computed by the leader's autopilot)") ||
		!strings.Contains(stdout.String(), "(leader)") {
		t.Errorf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	// Stop a follower.
	f := c.Index(c.Followers()[0])
	stopped := c.ID(f)
	c.Shutdown(f)
	var live []string
	for i, a := range addrs {
		if i != f {
			live = append(live, a)
		}
	}
	servers = strings.Join(live, ",")
	want(0, 2, func(st statusJSON) error {
		for _, s := range st.Servers {
			if s.ID == stopped && (s.AutopilotHealthy || s.Problem == "" || s.Autopilot == nil || s.Autopilot.Reason != s.Problem) {
				return fmt.Errorf("stopped %s shown healthy: %+v", stopped, s)
			}
		}
		return nil
	})
	c.Restart(f)
	servers = strings.Join(addrs, ",")
	want(1, 3, nil)
}

// TestLeaderTransferIfLeader: --if-leader asked of a follower does
// nothing (the preStop hook of a pod that does not lead); asked of the
// leader, it hands leadership to another server.
func TestLeaderTransferIfLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 3)
	leader := c.WaitForStableLeader(t)
	follower := c.Server((c.Index(leader) + 1) % c.Len())
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--servers", follower.GRPCAddr(), "leader", "transfer", "--if-leader"}, &stdout, &stderr); code != 0 ||
		stdout.String() != fmt.Sprintf("%s does not lead (leader %s): nothing to transfer\n", follower.ID(), leader.ID()) {
		t.Fatalf("asked of a follower: exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
	if now := c.WaitForStableLeader(t); now.ID() != leader.ID() {
		t.Fatalf("leadership moved from %s to %s though the follower was asked", leader.ID(), now.ID())
	}
	stdout.Reset()
	if code := run([]string{"--servers", leader.GRPCAddr(), "leader", "transfer", "--if-leader"}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "leadership transferred to ") ||
		strings.TrimSpace(strings.TrimPrefix(stdout.String(), "leadership transferred to ")) == leader.ID() {
		t.Fatalf("asked of the leader %s: exit %d, stdout %q, stderr:\n%s", leader.ID(), code, stdout.String(), stderr.String())
	}
	if now := c.WaitForLeader(t); now.ID() == leader.ID() {
		t.Errorf("%s still leads after the transfer", now.ID())
	}
}

// TestStatusAsksServersFlag: a server whose advertised gRPC address does
// not reach it from here (node2 of the canned cluster, at 127.0.0.1:7401
// which nothing serves) still answers status when --servers names an
// address where it does (a compose service published on the host).
func TestStatusAsksServersFlag(t *testing.T) {
	node1 := serve(t, cannedCluster())
	node2 := serve(t, cannedNode2())
	answered := func(servers string) bool {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run([]string{"--servers", servers, "status", "--json"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var st statusJSON
		if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
			t.Fatalf("%v\n%s", err, stdout.String())
		}
		for _, s := range st.Servers {
			if s.ID == "node2" {
				return s.Answered
			}
		}
		t.Fatalf("no node2 in %s", stdout.String())
		return false
	}
	if answered(node1) {
		t.Fatal("node2 answered with nothing serving its advertised address")
	}
	if !answered(node1 + "," + node2) {
		t.Error("node2 did not answer at its --servers address")
	}
}
