package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
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

func TestAdvertiseFlagsToConfig(t *testing.T) {
	o := defaultOptions()
	fs := serverFlags("rationd", &o)
	_, err := parseArgs(fs, []string{
		"--id", "n1", "--data-dir", "/d", "--raft-addr", "0.0.0.0:7410", "--grpc-addr", "0.0.0.0:7400", "--gossip-addr", "0.0.0.0:7420",
		"--advertise-raft-addr", "rationd-0.rationd:7410", "--advertise-grpc-addr", "rationd-0.rationd:7400",
		"--advertise-gossip-addr", "10.0.0.1:7420", "--join", "rationd-1.rationd:7420,rationd-2.rationd:7420",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.config(nil, nil)
	if cfg.RaftAddr != "0.0.0.0:7410" || cfg.AdvertiseRaftAddr != "rationd-0.rationd:7410" ||
		cfg.AdvertiseGRPCAddr != "rationd-0.rationd:7400" || cfg.AdvertiseGossipAddr != "10.0.0.1:7420" ||
		strings.Join(cfg.Join, ",") != "rationd-1.rationd:7420,rationd-2.rationd:7420" {
		t.Errorf("config: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestAddressErrors: an address peers cannot use is refused at start with
// the flag to fix.
func TestAddressErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--id", "n1", "--data-dir", dir}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"bind all, no advertise", []string{"--raft-addr", "0.0.0.0:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3"},
			`--raft-addr "0.0.0.0:1" binds every interface: set --advertise-raft-addr to the address peers reach this server at`},
		{"empty host, no advertise", []string{"--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", ":3"},
			`--gossip-addr ":3" binds every interface: set --advertise-gossip-addr`},
		{"advertise all", []string{"--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3", "--advertise-grpc-addr", "[::]:2"},
			`--advertise-grpc-addr "[::]:2" names no host peers can reach`},
		{"advertise port 0", []string{"--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3", "--advertise-raft-addr", "node1:0"},
			`--advertise-raft-addr "node1:0": port "0" is not 1-65535`},
		{"advertise no port", []string{"--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3", "--advertise-gossip-addr", "node1"},
			`--advertise-gossip-addr "node1" is not host:port`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(base[:len(base):len(base)], c.args...), &stdout, &stderr, nil)
			if code != 2 || !strings.Contains(stderr.String(), "rationd: invalid server configuration: "+c.want) {
				t.Errorf("exit %d, want 2 with %q; stderr:\n%s", code, c.want, stderr.String())
			}
		})
	}
}

// TestClusterOnDNSNames: three rationd advertise "localhost" for Raft,
// gRPC and gossip and join each other by that name. They bootstrap, the
// Raft configuration holds the names (dialled through DNS each time), and
// a write through each server reaches the leader.
func TestClusterOnDNSNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	ips, err := net.LookupIP("localhost")
	if err != nil || len(ips) == 0 {
		t.Skipf("localhost does not resolve: %v", err)
	}
	ports := make([]string, 9)
	for i, a := range freeAddrs(t, 9) {
		_, ports[i], _ = net.SplitHostPort(a)
	}
	name := func(i, svc int) string { return "localhost:" + ports[3*i+svc] } // svc: 0 raft, 1 grpc, 2 gossip
	bind := func(i, svc int) string { return "127.0.0.1:" + ports[3*i+svc] }
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 10\n    burst: 10\n    key: [tenant]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs [3]syncBuffer
	for i := range 3 {
		var join []string
		for j := range 3 {
			if j != i {
				join = append(join, name(j, 2))
			}
		}
		signals := make(chan os.Signal, 1)
		done := make(chan int, 1)
		args := []string{"--id", fmt.Sprintf("n%d", i), "--data-dir", t.TempDir(),
			"--raft-addr", bind(i, 0), "--grpc-addr", bind(i, 1), "--gossip-addr", bind(i, 2),
			"--advertise-raft-addr", name(i, 0), "--advertise-grpc-addr", name(i, 1), "--advertise-gossip-addr", name(i, 2),
			"--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--config", policy}
		go func() { done <- run(args, &bytes.Buffer{}, &logs[i], signals) }()
		t.Cleanup(func() {
			signals <- syscall.SIGTERM
			if code := <-done; code != 0 {
				t.Errorf("n%d exit %d; log:\n%s", i, code, logs[i].String())
			}
		})
	}

	dial := func(i int) *grpc.ClientConn {
		conn, err := grpc.NewClient(bind(i, 1), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := range 3 {
		conn := dial(i)
		a, leases := api.NewAdminClient(conn), api.NewLeasesClient(conn)
		for {
			err := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				st, err := a.Status(ctx, &api.StatusRequest{})
				if err != nil {
					return err
				}
				if st.GetLeader() == "" || len(st.GetServers()) != 3 {
					return fmt.Errorf("leader %q, %d servers", st.GetLeader(), len(st.GetServers()))
				}
				for _, s := range st.GetServers() {
					if !strings.HasPrefix(s.GetRaftAddress(), "localhost:") || !strings.HasPrefix(s.GetGrpcAddress(), "localhost:") {
						return fmt.Errorf("%s at raft %q, grpc %q", s.GetId(), s.GetRaftAddress(), s.GetGrpcAddress())
					}
				}
				// A write, forwarded to the leader by its advertised name
				// unless this server leads.
				resp, err := leases.Acquire(ctx, &api.AcquireRequest{
					Caller: &api.Caller{ClientId: fmt.Sprintf("dns-%d", i), Incarnation: 1, Seq: 1},
					Keys: []*api.AcquireKey{{Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "t"}},
						Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
				})
				if err != nil {
					return err
				}
				if e := resp.GetLeases()[0].GetError(); e != nil {
					return fmt.Errorf("acquire: %v", e)
				}
				return nil
			}()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d: %v; log:\n%s", i, err, logs[i].String())
			}
			<-tick.C
		}
	}
}
