//go:build jepsen

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
)

// In make jepsen (-tags jepsen), not make test: it starts five servers
// (about 8 s).

// TestRecoverLostQuorum: three servers, a policy and a lease; all
// stopped and two servers' data destroyed; the third recovered with
// rationd recover and started alone, two new servers with empty data
// joined to it: a leader and three voters, the policy kept, and every
// budget held for a lease duration (a grant right after gets nothing, in
// a new lease-ID generation) before grants resume.
func TestRecoverLostQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 10\n    burst: 20\n    key: [tenant]\n    lease: {duration: 2s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 15) // five servers: grpc, raft, gossip each
	grpcA := func(i int) string { return addrs[3*i] }
	raftA := func(i int) string { return addrs[3*i+1] }
	gossipA := func(i int) string { return addrs[3*i+2] }
	dataDirs := make([]string, 5)
	for i := range dataDirs {
		dataDirs[i] = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
	}
	type proc struct {
		signals chan os.Signal
		done    chan int
		log     *syncBuffer
	}
	start := func(i int, extra ...string) *proc {
		p := &proc{signals: make(chan os.Signal, 1), done: make(chan int, 1), log: &syncBuffer{}}
		args := append([]string{"--id", fmt.Sprintf("n%d", i+1), "--data-dir", dataDirs[i],
			"--grpc-addr", grpcA(i), "--raft-addr", raftA(i), "--gossip-addr", gossipA(i)}, extra...)
		go func() { p.done <- run(args, &bytes.Buffer{}, p.log, p.signals) }()
		return p
	}
	var running []*proc
	stop := func(p *proc) {
		p.signals <- syscall.SIGTERM
		if code := <-p.done; code != 0 {
			t.Errorf("exit %d:\n%s", code, p.log.String())
		}
	}
	defer func() {
		for _, p := range running {
			stop(p)
		}
	}()
	conn := func(i int) *grpc.ClientConn {
		c, err := grpc.NewClient(grpcA(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	waitFor := func(what string, cond func() error) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			err := cond()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				var logs strings.Builder
				for i, p := range running {
					fmt.Fprintf(&logs, "--- process %d:\n%s", i, p.log.String())
				}
				t.Fatalf("%s: %v after 60s\n%s", what, err, logs.String())
			}
			<-tick.C
		}
	}
	cluster := func(c *grpc.ClientConn, leader string, voters int) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := api.NewAdminClient(c).Status(ctx, &api.StatusRequest{})
			if err != nil {
				return err
			}
			n := 0
			for _, s := range st.GetServers() {
				if s.GetSuffrage() == "voter" {
					n++
				}
			}
			if st.GetLeader() == "" || (leader != "" && st.GetLeader() != leader) || n != voters || st.GetPolicies() != 1 {
				return fmt.Errorf("leader %q, %d voters, %d policies", st.GetLeader(), n, st.GetPolicies())
			}
			return nil
		}
	}
	acquire := func(c *grpc.ClientConn, client string, seq uint64) (*api.Grant, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := api.NewLeasesClient(c).Acquire(ctx, &api.AcquireRequest{
			Caller: &api.Caller{ClientId: client, Incarnation: 1, Seq: seq},
			Keys: []*api.AcquireKey{{Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "acme"}},
				Demand: &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 20_000}}},
		})
		if err != nil {
			return nil, err
		}
		kl := resp.GetLeases()[0]
		if kl.GetError() != nil {
			return nil, fmt.Errorf("%v", kl.GetError())
		}
		return kl.GetGrant(), nil
	}

	// The cluster, a lease of the whole burst, and n3 caught up.
	for i := range 3 {
		var join []string
		for j := range 3 {
			if j != i {
				join = append(join, gossipA(j))
			}
		}
		running = append(running, start(i, "--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--config", policy))
	}
	n3 := conn(2)
	waitFor("a leader of three", cluster(n3, "", 3))
	var before *api.Grant
	waitFor("a lease before the loss", func() (err error) { before, err = acquire(n3, "before", 1); return err })
	if before.GetStartMilli() != 20_000 {
		t.Fatalf("first grant %v, want the whole burst", before)
	}
	waitFor("n3 applied the grant", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := api.NewAdminClient(n3).Status(ctx, &api.StatusRequest{})
		if err != nil || st.GetAnsweredBy() != "n3" || st.GetLeases() != 1 {
			return fmt.Errorf("status %v: %v", st, err)
		}
		return nil
	})

	// The quorum lost for good: every server stopped, n1's and n2's data
	// destroyed.
	for _, p := range running {
		stop(p)
	}
	running = nil
	for _, d := range dataDirs[:2] {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	peers := filepath.Join(dir, "peers.json")
	pb, _ := json.Marshal([]peerEntry{{ID: "n3", Address: raftA(2)}})
	if err := os.WriteFile(peers, pb, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"recover", "--id", "n3", "--data-dir", dataDirs[2], "--peers", peers}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("rationd recover: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "n3 recovered") || !strings.Contains(stdout.String(), "1 policies") {
		t.Errorf("rationd recover said:\n%s", stdout.String())
	}
	t.Logf("rationd recover:\n%s", stdout.String())

	// n3 alone, then two new servers joining it.
	recovered := time.Now()
	running = append(running, start(2))
	for _, i := range []int{3, 4} {
		running = append(running, start(i, "--join", gossipA(2)))
	}
	// The first grant after the recovery, as soon as there is a leader:
	// held, and in a new ID generation.
	var held *api.Grant
	waitFor("a leader after the recovery", func() (err error) { held, err = acquire(n3, "after", 1); return err })
	tookOver := time.Now()
	if held.GetStartMilli() != 0 || held.GetRateMilliPerSec() != 0 || held.GetLeaseId() <= 1<<32 {
		t.Fatalf("a grant right after the recovery: %v; want nothing, in a new lease-ID generation", held)
	}
	waitFor("a leader and three voters, the policy kept", cluster(n3, "n3", 3))
	seq := uint64(1)
	waitFor("grants resuming after the hold", func() error {
		seq++
		g, err := acquire(n3, "after", seq)
		if err != nil {
			return err
		}
		if g.GetRateMilliPerSec() == 0 {
			return fmt.Errorf("still held: %v", g)
		}
		return nil
	})
	held4 := time.Since(tookOver)
	t.Logf("recovered: a leader %v after start; budgets held %v after the first grant (lease duration 2s + 1s margin)",
		tookOver.Sub(recovered).Round(time.Millisecond), held4.Round(time.Millisecond))
	if held4 < 2*time.Second {
		t.Errorf("grants resumed %v after the recovered leader's first grant, before a lease duration", held4)
	}
}
