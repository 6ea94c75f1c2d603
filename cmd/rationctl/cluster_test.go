package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
)

// The end-to-end test drives real rationd processes with the real
// rationctl binary, the way an operator would.

// buildBinaries builds rationd and rationctl once per test binary, into a
// directory TestMain removes, and returns their paths: every test that runs
// the binaries as a user would shares the one build (each used to link its
// own, two large binaries per test). CGO_ENABLED=0 and -trimpath, as a
// release build (make release-binaries) and the rolling upgrade's older
// builds: the compiled packages come from one build cache entry.
func buildBinaries(t *testing.T) (rationd, rationctl string) {
	t.Helper()
	builtBins.once.Do(func() {
		dir, err := os.MkdirTemp("", "rationctl-test-bin-")
		if err != nil {
			builtBins.err = err
			return
		}
		builtBins.dir = dir
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			goTool = "go"
		}
		cmd := exec.Command(goTool, "build", "-trimpath", "-o", dir+string(filepath.Separator), "../rationd", ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			builtBins.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if builtBins.err != nil {
		t.Fatal(builtBins.err)
	}
	return filepath.Join(builtBins.dir, "rationd"), filepath.Join(builtBins.dir, "rationctl")
}

// builtBins is buildBinaries' one build.
var builtBins struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBins.dir != "" {
		os.RemoveAll(builtBins.dir)
	}
	os.Exit(code)
}

// freeLoopbackAddrs returns n loopback addresses whose ports were free for
// both TCP and UDP (gossip uses both) a moment ago.
func freeLoopbackAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var held []interface{ Close() error }
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
		if err != nil {
			continue
		}
		held = append(held, u)
		out = append(out, l.Addr().String())
	}
	return out
}

// serverProc is one rationd process.
type serverProc struct {
	id, grpcAddr, logPath string
	raftAddr, gossipAddr  string
	cmd                   *exec.Cmd
	exited                chan struct{} // closed when the process has exited
}

func (p *serverProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// waitExit waits for the process to exit and returns its exit code.
func (p *serverProc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.id, d)
		return -1
	}
}

// startCluster starts three rationd processes that bootstrap together.
// Cleanup kills whatever is still running and, if the test failed, logs
// each server's log.
func startCluster(t *testing.T, rationd string) []*serverProc {
	t.Helper()
	return startClusterArgs(t, rationd, nil)
}

// startClusterArgs is startCluster with extra flags for server i (0-2),
// if extra is set.
func startClusterArgs(t *testing.T, rationd string, extra func(i int) []string) []*serverProc {
	t.Helper()
	dir := t.TempDir()
	addrs := freeLoopbackAddrs(t, 9)
	gossip := addrs[6:9]
	procs := make([]*serverProc, 3)
	for i := range procs {
		id := fmt.Sprintf("node%d", i+1)
		var join []string
		for j, g := range gossip {
			if j != i {
				join = append(join, g)
			}
		}
		p := &serverProc{id: id, grpcAddr: addrs[i], raftAddr: addrs[3+i], gossipAddr: gossip[i],
			logPath: filepath.Join(dir, id+".log"), exited: make(chan struct{})}
		logFile, err := os.Create(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(rationd,
			"--id", id, "--data-dir", filepath.Join(dir, id),
			"--grpc-addr", addrs[i], "--raft-addr", addrs[3+i], "--gossip-addr", gossip[i],
			"--join", strings.Join(join, ","), "--bootstrap-expect", "3")
		if extra != nil {
			p.cmd.Args = append(p.cmd.Args, extra(i)...)
		}
		p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
		if err := p.cmd.Start(); err != nil {
			logFile.Close()
			t.Fatal(err)
		}
		go func() {
			_ = p.cmd.Wait()
			logFile.Close()
			close(p.exited)
		}()
		procs[i] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.running() {
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			for _, p := range procs {
				log, _ := os.ReadFile(p.logPath)
				t.Logf("--- %s log:\n%s", p.id, log)
			}
		}
	})
	return procs
}

// ctl runs the rationctl binary and returns its stdout, stderr and exit
// code.
func ctl(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

// waitFor polls cond until it holds or the deadline passes; what and the
// last note from cond go into the failure.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, note := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, note)
		}
		<-tick.C
	}
}

// TestClusterEndToEnd starts a real three-node cluster, applies a policy
// with rationctl, takes a lease over gRPC, kills the leader and checks the
// lease survives under the new leader; then stops the rest with SIGTERM.
func TestClusterEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	procs := startCluster(t, rationd)
	var grpcAddrs []string
	for _, p := range procs {
		grpcAddrs = append(grpcAddrs, p.grpcAddr)
	}
	servers := "--servers=" + strings.Join(grpcAddrs, ",")

	status := func() (statusJSON, string) {
		out, errOut, code := ctl(t, rationctl, "status", "--json", servers)
		var st statusJSON
		if code != 0 {
			return st, fmt.Sprintf("exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json is not JSON: %v\n%s", err, out)
		}
		return st, out
	}
	var st statusJSON
	waitFor(t, 60*time.Second, "a leader and 3 healthy voters", func() (bool, string) {
		var note string
		st, note = status()
		healthyVoters := 0
		for _, s := range st.Servers {
			if s.Suffrage == "voter" && s.Healthy {
				healthyVoters++
			}
		}
		return st.Leader != "" && healthyVoters == 3, note
	})

	// A policy, with leases long enough to outlive the failover.
	policyFile := filepath.Join(t.TempDir(), "e2e.yaml")
	if err := os.WriteFile(policyFile, []byte(`policies:
  - name: e2e
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease:
      duration: 2m
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := ctl(t, rationctl, "policy", "apply", "-f", policyFile, servers)
	if code != 0 || !strings.HasPrefix(out, "applied e2e (log index ") {
		t.Fatalf("policy apply: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// A lease, through the public lease API of a follower (it forwards).
	follower := procs[0]
	if follower.id == st.Leader {
		follower = procs[1]
	}
	conn, err := grpc.NewClient(follower.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := api.NewLeasesClient(conn).Acquire(ctx, &api.AcquireRequest{
		Caller: &api.Caller{ClientId: "e2e-client", Incarnation: 1, Seq: 1},
		Keys: []*api.AcquireKey{{
			Key:    &api.Key{Policy: "e2e", Attributes: map[string]string{"tenant": "acme"}},
			Demand: &api.Demand{RateMilliPerSec: 5000, BurstMilli: 10000},
		}},
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if len(resp.GetLeases()) != 1 || resp.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("Acquire granted nothing: %v", resp)
	}
	grant := resp.GetLeases()[0].GetGrant()

	findLease := func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, "leases", "--json", "--policy", "e2e", servers)
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, errOut)
		}
		var ls leasesJSON
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatalf("leases --json is not JSON: %v\n%s", err, out)
		}
		for _, l := range ls.Leases {
			if l.LeaseID == grant.GetLeaseId() {
				ok := l.Policy == "e2e" && l.Key == "acme" && l.ClientID == "e2e-client" && l.Incarnation == 1 &&
					l.RateMilliPerSec == grant.GetRateMilliPerSec() && l.CapMilli == grant.GetCapMilli()
				return ok, out
			}
		}
		return false, out
	}
	if ok, out := findLease(); !ok {
		t.Fatalf("leases --json does not show lease %d as granted (%v):\n%s", grant.GetLeaseId(), grant, out)
	}

	// Kill the leader; another takes over and still holds the lease.
	oldLeader := st.Leader
	var leaderProc *serverProc
	for _, p := range procs {
		if p.id == oldLeader {
			leaderProc = p
		}
	}
	if leaderProc == nil {
		t.Fatalf("leader %q is none of the servers", oldLeader)
	}
	if err := leaderProc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	leaderProc.waitExit(t, 10*time.Second)
	waitFor(t, 60*time.Second, "a new leader", func() (bool, string) {
		st, note := status()
		return st.Leader != "" && st.Leader != oldLeader, note
	})
	waitFor(t, 30*time.Second, "the lease listed under the new leader", findLease)

	// SIGTERM the rest: both exit 0.
	for _, p := range procs {
		if p.running() {
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range procs {
		if p == leaderProc {
			continue
		}
		if code := p.waitExit(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.id, code)
		}
	}
}
