package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHTTPAddr runs "rationd dev --http-addr A --enable-pprof" in-process:
// /readyz turns 200, /metrics parses with the Prometheus text parser and
// holds the server's and the demo policy's figures, pprof answers, the
// gRPC health service says SERVING; SIGTERM still exits 0.
func TestHTTPAddr(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addrs := freeAddrs(t, 4)
	signals := make(chan os.Signal, 1)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"dev", "--grpc-addr", addrs[0], "--raft-addr", addrs[1], "--gossip-addr", addrs[2],
			"--http-addr", addrs[3], "--enable-pprof"}, &stdout, &stderr, signals)
	}()
	exited := false
	t.Cleanup(func() {
		if !exited {
			signals <- syscall.SIGTERM
			<-done
		}
	})
	base := "http://" + addrs[3]
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	// The polls below wait for the next tick, or fail at once if rationd
	// exits meanwhile.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	next := func(what string) {
		t.Helper()
		select {
		case code := <-done:
			exited = true
			t.Fatalf("rationd dev exited %d while waiting for %s:\n%s", code, what, stderr.String())
		case <-tick.C:
		}
	}
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after 30s: %d %s\nstderr:\n%s", code, body, stderr.String())
		}
		select {
		case code := <-done:
			exited = true
			t.Fatalf("rationd dev exited %d:\n%s", code, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The demo policy is applied by the first leader after it is ready:
	// wait for its gauge.
	for {
		code, body := get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mf, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		if f := mf["ration_policy_burst_tokens"]; f != nil && len(f.GetMetric()) == 1 {
			for _, name := range []string{"ration_raft_state", "ration_raft_term", "go_goroutines", "process_cpu_seconds_total", "grpc_server_handled_total"} {
				if mf[name] == nil {
					t.Errorf("/metrics has no %s", name)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no policy gauge in /metrics after 30s:\n%s", body)
		}
		next("the policy gauge")
	}
	if code, body := get("/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez: %d %q", code, body)
	}
	if code, _ := get("/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if !strings.Contains(stderr.String(), `msg=listening service=http addr=`+addrs[3]) {
		t.Errorf("no http listening line in the log:\n%s", stderr.String())
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ration.v1.Leases"})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health: %v %v", r, err)
		}
		next("gRPC health")
	}

	signals <- syscall.SIGTERM
	select {
	case code := <-done:
		exited = true
		if code != 0 {
			t.Errorf("exit %d after SIGTERM:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// TestHTTPAddrInUse: an --http-addr that cannot be bound is exit 1, and
// the server started meanwhile is stopped.
func TestHTTPAddrInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addrs := freeAddrs(t, 3)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var stdout, stderr syncBuffer
	code := run([]string{"dev", "--grpc-addr", addrs[0], "--raft-addr", addrs[1], "--gossip-addr", addrs[2],
		"--http-addr", busy.Addr().String()}, &stdout, &stderr, make(chan os.Signal))
	if code != 1 || !strings.Contains(stderr.String(), "cannot start: http listener: listen tcp "+busy.Addr().String()) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}
