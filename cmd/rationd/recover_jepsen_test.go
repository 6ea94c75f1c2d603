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

// TestRecoverLostQuorum: three servers and a policy (r = 1/s, B = 20,
// 8 s leases); n3 stopped, then a lease of the whole burst granted by the
// other two (n3's disk is stale); those two stopped and their data
// destroyed; n3 recovered with rationd recover and started alone, two new servers with empty data joined to it: a leader and three
// voters, the policy kept, and every budget held for a lease duration (a
// grant right after gets nothing, in a new lease-ID generation) before
// grants resume. The checker: no window [a, b] between grants and
// deadlines could admit more than B + r·(b - a).
func TestRecoverLostQuorum(t *testing.T) {
	if err := recoverLostQuorum(t, nil); err != nil {
		t.Fatal(err)
	}
}

// recGrant is a grant as the test saw it: sent at, lasting to until.
type recGrant struct {
	at, until    time.Time
	tokens, rate int64 // milli-tokens, and per second
	who          string
}

// checkBound: in every window [a, b] whose ends are grant times or
// deadlines, what every lease could admit (its start and top-up if
// granted within it, its rate over the part of its life inside it) is at
// most B + r·(b - a).
func checkBound(grants []recGrant, rate, burst int64) error {
	var ends []time.Time
	for _, g := range grants {
		ends = append(ends, g.at, g.until)
	}
	for _, g := range grants {
		a := g.at
		for _, b := range ends {
			if b.Before(a) {
				continue
			}
			var got int64
			for _, h := range grants {
				if !h.at.Before(a) && !h.at.After(b) {
					got += h.tokens
				}
				lo, hi := h.at, h.until
				if lo.Before(a) {
					lo = a
				}
				if hi.After(b) {
					hi = b
				}
				if hi.After(lo) {
					got += h.rate * int64(hi.Sub(lo)) / 1e9
				}
			}
			if limit := burst + rate*int64(b.Sub(a))/1e9; got > limit {
				return fmt.Errorf("the bound is broken: the window of %v from the %s grant could admit %d milli-tokens, more than B + r·W = %d",
					b.Sub(a).Round(time.Millisecond), g.who, got, limit)
			}
		}
	}
	return nil
}

// recoverLostQuorum runs the scenario, recovering with recoverArgs
// added; it fails t on what is not the bound, and returns the checker's
// verdict.
func recoverLostQuorum(t *testing.T, recoverArgs []string) error {
	if testing.Short() {
		t.Skip("starts servers")
	}
	const leaseDuration = 8 * time.Second
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 1\n    burst: 20\n    key: [tenant]\n    lease: {duration: 8s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var grants []recGrant
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
		sent := time.Now()
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
		g := kl.GetGrant()
		grants = append(grants, recGrant{at: sent, until: sent.Add(leaseDuration), tokens: g.GetStartMilli() + g.GetTopUpMilli(),
			rate: g.GetRateMilliPerSec(), who: fmt.Sprintf("%s/%d", client, seq)})
		return g, nil
	}

	// The cluster; then n3 stopped (its disk is now stale), and a lease
	// of the whole burst granted by n1 and n2, which n3 never sees.
	for i := range 3 {
		var join []string
		for j := range 3 {
			if j != i {
				join = append(join, gossipA(j))
			}
		}
		running = append(running, start(i, "--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--config", policy))
	}
	n1, n3 := conn(0), conn(2)
	waitFor("a leader of three", cluster(n3, "", 3))
	stop(running[2])
	running = running[:2]
	var before *api.Grant
	waitFor("a lease after n3 stopped", func() (err error) { before, err = acquire(n1, "before", 1); return err })
	if before.GetStartMilli() != 20_000 {
		t.Fatalf("first grant %v, want the whole burst", before)
	}

	// The quorum lost for good: n1 and n2 stopped, their data destroyed.
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
	if code := run(append([]string{"recover", "--id", "n3", "--data-dir", dataDirs[2], "--peers", peers}, recoverArgs...), &stdout, &stderr, nil); code != 0 {
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
	if recoverArgs == nil && held.GetLeaseId() <= 1<<32 {
		t.Errorf("a grant right after the recovery: lease ID %d, not of a new generation", held.GetLeaseId())
	}
	if err := checkBound(grants, 1000, 20_000); err != nil {
		return err
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
	heldFor := time.Since(tookOver)
	t.Logf("recovered: a leader %v after start; budgets held %v after the first grant (lease duration 8s + 1s margin)",
		tookOver.Sub(recovered).Round(time.Millisecond), heldFor.Round(time.Millisecond))
	if heldFor < leaseDuration {
		t.Errorf("grants resumed %v after the recovered leader's first grant, before a lease duration", heldFor)
	}
	return checkBound(grants, 1000, 20_000)
}
