package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/limits"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// A bucket spends its burst, then refuses until it refills at its rate;
// another key's bucket is unaffected.
func TestLimitTableTokenBucket(t *testing.T) {
	tb := newLimitTable("client", "--lease-client-rps", 2, 3, 100)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 3; i++ {
		if ok, _ := tb.take("a", t0); !ok {
			t.Fatalf("call %d of the burst refused", i+1)
		}
	}
	ok, wait := tb.take("a", t0)
	if ok {
		t.Fatal("a fourth call at once was admitted: burst 3")
	}
	if wait != 500*time.Millisecond {
		t.Errorf("retry after %v, want 500ms at 2/s", wait)
	}
	if ok, _ := tb.take("b", t0); !ok {
		t.Fatal("another key was refused")
	}
	if ok, _ := tb.take("a", t0.Add(499*time.Millisecond)); ok {
		t.Fatal("admitted before a token refilled")
	}
	if ok, _ := tb.take("a", t0.Add(500*time.Millisecond)); !ok {
		t.Fatal("refused after a token refilled")
	}
	if got := tb.refusals(); got != 2 {
		t.Errorf("refusals %d, want 2", got)
	}
	if newLimitTable("client", "", 0, 10, 10) != nil {
		t.Error("rate 0 made a table: want the limit off")
	}
}

// However many keys come, a table holds at most max buckets; a refilled
// bucket is dropped by the next sweep; dropping only ever refills.
func TestLimitTableBounded(t *testing.T) {
	const max = 64
	tb := newLimitTable("client", "--lease-client-rps", 1, 2, max)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 10_000; i++ {
		tb.take(fmt.Sprint("id-", i), t0.Add(time.Duration(i)*time.Microsecond))
		if n := tb.len(); n > max {
			t.Fatalf("after %d keys the table holds %d buckets, more than %d", i+1, n, max)
		}
	}
	// Everything refills within 2 s; the next new key after the sweep
	// interval sweeps them all.
	later := t0.Add(limiterSweepEvery + time.Second)
	tb.take("fresh", later)
	if n := tb.len(); n != 1 {
		t.Fatalf("after a sweep the table holds %d buckets, want only the fresh one", n)
	}
	// A busy key survives a flood of new keys into a full table: the
	// least recently used of a sample goes, and the busy key is the most
	// recently used.
	tb = newLimitTable("client", "--lease-client-rps", 1000, 2000, max)
	for i := 0; i < 5000; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		tb.take("busy", now)
		tb.take(fmt.Sprint("flood-", i), now)
	}
	tb.mu.Lock()
	_, kept := tb.buckets["busy"]
	tb.mu.Unlock()
	if !kept {
		t.Error("the busy key's bucket was dropped")
	}
	// Negative control: without the bound the flood would have grown the
	// table to every key.
	if tb.len() > max {
		t.Fatalf("table holds %d", tb.len())
	}
}

func ctxFrom(addr string, forwarded bool) context.Context {
	tcp, _ := net.ResolveTCPAddr("tcp", addr)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tcp})
	if forwarded {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(ForwardedMetadataKey, "1"))
	}
	return ctx
}

// A forwarded call is not counted again when it comes from a server's
// address; one that only says it was forwarded is counted.
func TestLimitsCountForwardedOnlyFromServers(t *testing.T) {
	cfg := TestConfig()
	cfg.ID, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = "s1", "10.0.0.1:7400", "10.0.0.1:7300", "10.0.0.1:7200"
	s := &Server{cfg: cfg, log: slog.New(slog.DiscardHandler), members: &membership{view: map[string]viewEntry{
		"s2": {info: memberInfo{Address: "10.0.0.2:7200", Status: "alive", Meta: serverMeta{ID: "s2", GRPCAddr: "10.0.0.2:7400", RaftAddr: "10.0.0.2:7300"}}},
		"s3": {info: memberInfo{Address: "10.0.0.3:7200", Status: "dead", Meta: serverMeta{ID: "s3", GRPCAddr: "10.0.0.3:7400"}}, departed: time.Now()},
	}}}
	l := newLeaseLimits(s)
	const m = "/ration.v1.Leases/Acquire"
	for _, c := range []struct {
		addr      string
		forwarded bool
		want      bool
	}{
		{"192.0.2.7:5000", false, true},
		{"192.0.2.7:5000", true, true}, // claims to be forwarded, not a server
		{"10.0.0.1:40000", true, false},
		{"10.0.0.2:40000", true, false}, // a live member
		{"10.0.0.3:40000", true, true},  // a dead one: counted
		{"10.0.0.1:40000", false, true}, // a server's own address, not forwarded
	} {
		if got := l.counted(ctxFrom(c.addr, c.forwarded), m); got != c.want {
			t.Errorf("call from %s forwarded=%v: counted %v, want %v", c.addr, c.forwarded, got, c.want)
		}
	}
	if l.counted(ctxFrom("192.0.2.7:5000", false), "/ration.v1.Admin/Status") {
		t.Error("an admin call was counted")
	}
}

// A client ID too long for validation never becomes a bucket's key (the
// table's memory bound counts buckets, so their keys must be short).
func TestLimitsIgnoreOverlongClientIDs(t *testing.T) {
	cfg := TestConfig()
	cfg.ID = "s1"
	s := &Server{cfg: cfg, log: slog.New(slog.DiscardHandler), members: &membership{view: map[string]viewEntry{}}}
	l := newLeaseLimits(s)
	info := &grpc.UnaryServerInfo{FullMethod: "/ration.v1.Leases/Acquire"}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	for _, id := range []string{strings.Repeat("x", limits.ClientIDBytes+1), strings.Repeat("y", 1<<20), "", "fine"} {
		req := &api.AcquireRequest{Caller: &api.Caller{ClientId: id}}
		if _, err := l.clientUnary(ctxFrom("192.0.2.7:5000", false), req, info, ok); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.client.len(); n != 1 {
		t.Fatalf("%d buckets, want 1 (only the ID that validation accepts)", n)
	}
}
