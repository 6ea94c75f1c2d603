package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
	"github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Concurrency policies of the Config.Slots tests; each test has a tenant
// of its own, so they share one cluster.
const slotPolicies = `
policies:
  - {name: conc, algorithm: concurrency, limit: 3, max_duration: 2s, key: [tenant]}
  - {name: conc-one, algorithm: concurrency, limit: 1, max_duration: 4s, key: [tenant]}
  - {name: not-conc, algorithm: token-bucket, rate: 1, burst: 1, key: [tenant]}
`

type slotEnv struct {
	clients []*client.Client
}

func startSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, slotPolicies)
	var servers []string
	for i := range c.Len() {
		servers = append(servers, c.Config(i).GRPCAddr)
	}
	e := &slotEnv{}
	for i := range 3 {
		cl, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: fmt.Sprintf("replica-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		e.clients = append(e.clients, cl)
	}
	return e
}

// slotService is a test service whose unary handler is work, and whose
// client stream runs until the client closes it.
type slotService struct {
	testpb.UnimplementedTestServiceServer
	work func(ctx context.Context) error
	// streamCtx gets each stream handler's context.
	streamCtx chan context.Context
}

func (s *slotService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.work(ctx); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *slotService) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	if s.streamCtx != nil {
		s.streamCtx <- stream.Context()
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{})
		} else if err != nil {
			return err
		}
	}
}

// recoverUnary is the application's outermost interceptor: a handler's
// panic becomes INTERNAL (gRPC does not recover panics by itself).
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "handler panicked: %v", p)
		}
	}()
	return h(ctx, req)
}

// serveSlots runs svc behind recoverUnary, auth and the interceptors of
// a Config with Slots l (tenant keys by principal), and returns a client.
func serveSlots(t *testing.T, cl *client.Client, l *inflight.ClusterLimiter, svc *slotService) testpb.TestServiceClient {
	t.Helper()
	g := newInterceptor(t, grpclimit.Config{Client: cl, Slots: l, SlotsKey: grpclimit.PrincipalKey("tenant")})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary, authUnary, g.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(authStream, g.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, svc)
	return testpb.NewTestServiceClient(start(t, srv, ln))
}

func (e *slotEnv) limiter(t *testing.T, i int, policy string, cfg inflight.Config) *inflight.ClusterLimiter {
	t.Helper()
	l := inflight.Cluster(e.clients[i], policy, "tenant", cfg)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

var acmeKey = client.Key{"tenant": "acme"}

func waitSlots(t *testing.T, l *inflight.ClusterLimiter, running, waiting int64) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if _, r, w := l.State(acmeKey); r != running || w != waiting {
			return fmt.Errorf("%d running and %d waiting, want %d and %d", r, w, running, waiting)
		}
		return nil
	})
}

// TestSlotsInterceptors runs the Config.Slots tests on one cluster.
func TestSlotsInterceptors(t *testing.T) {
	e := startSlotEnv(t)
	t.Run("ClusterWideLimit", func(t *testing.T) {
		if peak := grpcClusterWide(t, e, false); peak > 3 {
			t.Fatalf("%d handlers ran at once across the replicas, more than the limit 3", peak)
		}
	})
	t.Run("PanicReleases", func(t *testing.T) {
		if running := grpcAfterPanic(t, e); running != 0 {
			t.Fatalf("%d slots still taken after the handler panicked", running)
		}
	})
	t.Run("StreamHoldsItsSlotUntilItEnds", func(t *testing.T) { testSlotStream(t, e) })
	t.Run("QueueFullAndDeadline", func(t *testing.T) { testSlotRefusals(t, e) })
	t.Run("CancelReleases", func(t *testing.T) { testSlotCancel(t, e) })
	t.Run("CarelessCallers", func(t *testing.T) { testSlotCareless(t, e) })
}

// grpcClusterWide: three replicas' gRPC servers, four callers each, on
// policy conc (limit 3); it returns the most handlers that ran at once,
// counted in the handlers. With broken, replica 0 has no queue (refused
// whenever its slots are busy): the run-on-refusal control's replica.
func grpcClusterWide(t *testing.T, e *slotEnv, broken bool) int64 {
	var now, peak atomic.Int64
	per := make([]atomic.Int64, 3)
	work := func(i int) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			v := now.Add(1)
			for m := peak.Load(); v > m && !peak.CompareAndSwap(m, v); m = peak.Load() {
			}
			defer now.Add(-1)
			tm := time.NewTimer(3 * time.Millisecond)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-ctx.Done():
			}
			per[i].Add(1)
			return nil
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := inflight.Config{MaxQueue: 8, MaxWait: time.Second}
		if broken && i == 0 {
			cfg = inflight.Config{}
		}
		tc := serveSlots(t, e.clients[i], e.limiter(t, i, "conc", cfg), &slotService{work: work(i)})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					ctx, cancel := context.WithTimeout(as("acme"), 10*time.Second)
					_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
					cancel()
					if c := status.Code(err); c != codes.OK && c != codes.ResourceExhausted {
						t.Errorf("replica %d: %v", i, err)
						return
					}
				}
			}()
		}
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for i := range per {
			if per[i].Load() < 50 {
				return fmt.Errorf("replica %d ran %d calls", i, per[i].Load())
			}
		}
		if broken && peak.Load() <= 3 {
			return fmt.Errorf("the control has run at most %d at once so far", peak.Load())
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("at most %d calls at once (limit 3)", peak.Load())
	return peak.Load()
}

// grpcAfterPanic: a unary handler panics; once the client has its
// INTERNAL (the outer recovery ran after the slot's deferred release), it
// returns how many slots are still taken.
func grpcAfterPanic(t *testing.T, e *slotEnv) int64 {
	l := e.limiter(t, 0, "conc", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	tc := serveSlots(t, e.clients[0], l, &slotService{work: func(context.Context) error { panic("boom") }})
	ctx, cancel := context.WithTimeout(as("acme"), 30*time.Second)
	defer cancel()
	for range 2 {
		if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.Internal {
			t.Fatalf("a panicking handler: %v, want INTERNAL from the recovery interceptor", err)
		}
	}
	_, running, _ := l.State(acmeKey)
	return running
}

// testSlotStream: a client stream holds its slot from its start to its
// end, under the slot's context (max_duration: a deadline).
func testSlotStream(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 1, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	svc := &slotService{work: func(context.Context) error { return nil }, streamCtx: make(chan context.Context, 1)}
	tc := serveSlots(t, e.clients[1], l, svc)
	ctx, cancel := context.WithTimeout(as("acme"), 30*time.Second)
	defer cancel()
	stream, err := tc.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sctx := <-svc.streamCtx
	if _, ok := sctx.Deadline(); !ok {
		t.Error("the stream handler's context has no deadline (max_duration 4s)")
	}
	if p, _ := grpclimit.PrincipalFromContext(sctx); p != "acme" {
		t.Errorf("the stream handler's principal %q: the slot's context lost the call's values", p)
	}
	for range 3 {
		if err := stream.Send(&testpb.StreamingInputCallRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, running, _ := l.State(acmeKey); running != 1 {
		t.Errorf("%d running while the stream is open, want 1", running)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := l.State(acmeKey); running != 0 {
		t.Errorf("%d running after the stream ended, want 0", running)
	}
}

// testSlotRefusals: with the slot taken and the queue (1) full, a call is
// refused at once with RESOURCE_EXHAUSTED, QuotaFailure and RetryInfo; a
// call whose deadline comes before MaxWait is refused before it.
func testSlotRefusals(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 2, "conc-one", inflight.Config{MaxQueue: 1, MaxWait: time.Minute, DeadlineMargin: 500 * time.Millisecond})
	hold := make(chan struct{})
	tc := serveSlots(t, e.clients[2], l, &slotService{work: func(ctx context.Context) error {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	}})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(hold)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(as("acme"), 30*time.Second)
			defer cancel()
			_, _ = tc.UnaryCall(ctx, &testpb.SimpleRequest{})
		}()
		waitSlots(t, l, 1, int64(i))
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(as("acme"), 30*time.Second)
	defer cancel()
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("a full queue's refusal took %v", took)
	}
	st, ri, qf := details(t, err)
	if st.Code() != codes.ResourceExhausted || ri == nil || ri.GetRetryDelay().AsDuration() != time.Second ||
		qf == nil || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "conc-one" {
		t.Errorf("full queue: %v (RetryInfo %v, QuotaFailure %v), want RESOURCE_EXHAUSTED naming conc-one, retry in 1s", err, ri, qf)
	}

	// The deadline: a call on another handle of the same key (its slot is
	// l's), refused 500ms (DeadlineMargin) before its 2s deadline.
	waitSlots(t, l, 1, 1)
	l2 := e.limiter(t, 2, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: time.Minute, DeadlineMargin: 500 * time.Millisecond})
	tc2 := serveSlots(t, e.clients[2], l2, &slotService{work: func(ctx context.Context) error { <-ctx.Done(); return nil }})
	dctx, dcancel := context.WithTimeout(as("acme"), 2*time.Second)
	defer dcancel()
	_, err = tc2.UnaryCall(dctx, &testpb.SimpleRequest{})
	if dctx.Err() != nil {
		t.Errorf("answered after the call's deadline: %v", err)
	}
	if c := status.Code(err); c != codes.ResourceExhausted {
		t.Errorf("a deadline before MaxWait: %v, want RESOURCE_EXHAUSTED before the deadline", err)
	}
}

// testSlotCancel: a running call whose client cancels it gives its slot
// back once the handler returns (it waits on its context).
func testSlotCancel(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 0, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	started := make(chan struct{}, 1)
	tc := serveSlots(t, e.clients[0], l, &slotService{work: func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}})
	ctx, cancel := context.WithCancel(as("acme"))
	done := make(chan error, 1)
	go func() { _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}); done <- err }()
	<-started
	waitSlots(t, l, 1, 0)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled call: %v", err)
	}
	waitSlots(t, l, 0, 0)
}

// testSlotCareless: configuration mistakes are errors at New; a key
// function's nil result runs the call without a slot; a policy that is not
// a concurrency policy is UNAVAILABLE, not a panic; an anonymous caller
// is keyed by the empty principal.
func testSlotCareless(t *testing.T, e *slotEnv) {
	if _, err := grpclimit.New(grpclimit.Config{Client: e.clients[0]}); err == nil {
		t.Error("no Layers and no Slots: no error")
	}
	if _, err := grpclimit.New(grpclimit.Config{Client: e.clients[0], Layers: []grpclimit.Layer{{Policy: "other"}}, SlotsKey: grpclimit.PrincipalKey("tenant")}); err == nil {
		t.Error("SlotsKey without Slots: no error")
	}
	l := e.limiter(t, 0, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	var ran atomic.Int64
	g := newInterceptor(t, grpclimit.Config{Client: e.clients[0], Slots: l,
		SlotsKey: func(context.Context, string, string) client.Key { return nil }})
	_, err := g.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"},
		func(ctx context.Context, _ any) (any, error) { ran.Add(1); return nil, nil })
	if err != nil || ran.Load() != 1 {
		t.Errorf("a nil key: %v, ran %d; want it run without a slot", err, ran.Load())
	}
	notConc := e.limiter(t, 0, "not-conc", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	tc := serveSlots(t, e.clients[0], notConc, &slotService{work: func(context.Context) error { return nil }})
	ctx, cancel := context.WithTimeout(as("acme"), 30*time.Second)
	defer cancel()
	if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("not a concurrency policy: %v, want UNAVAILABLE", err)
	}
	anon := serveSlots(t, e.clients[0], l, &slotService{work: func(context.Context) error { return nil }})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if _, err := anon.UnaryCall(ctx2, &testpb.SimpleRequest{}); err != nil {
		t.Errorf("an anonymous call: %v", err)
	}
	if _, running, waiting := l.State(client.Key{"tenant": ""}); running != 0 || waiting != 0 {
		t.Errorf("the anonymous key after its call: %d running, %d waiting", running, waiting)
	}
	// A cancelled call: CANCELLED, before any slot.
	dead, cancel3 := context.WithCancel(context.Background())
	cancel3()
	_, err = g.UnaryServerInterceptor()(dead, nil, &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"},
		func(ctx context.Context, _ any) (any, error) { return nil, nil })
	if err != nil { // nil key: no slot, runs
		t.Errorf("a cancelled call with a nil key: %v", err)
	}
	g2 := newInterceptor(t, grpclimit.Config{Client: e.clients[0], Slots: l})
	_, err = g2.UnaryServerInterceptor()(dead, nil, &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"},
		func(ctx context.Context, _ any) (any, error) { t.Error("ran"); return nil, nil })
	if status.Code(err) != codes.Canceled {
		t.Errorf("a cancelled call: %v, want CANCELLED", err)
	}
}
