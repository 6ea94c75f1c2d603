package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Policies. Rate 0.001/s is "no refill" within a test: a client's bucket
// mints one milli-token per 1.001 s, never a whole token in a test's
// seconds, so a test can count admissions exactly; such a bucket's
// RetryAfter is about 1000 s.
const policies = `
policies:
  - name: tight
    algorithm: token-bucket
    rate: 0.001
    burst: 3
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: refilling
    algorithm: token-bucket
    rate: 1
    burst: 3
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: roomy
    algorithm: token-bucket
    rate: 0.001
    burst: 1000
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: shadowed
    algorithm: token-bucket
    rate: 0.001
    burst: 2
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
    shadow: true
  - name: closed
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 1s, renew_after: 300ms, drift_ppm: 1000}
`

const (
	unaryMethod  = "/grpc.testing.TestService/UnaryCall"
	emptyMethod  = "/grpc.testing.TestService/EmptyCall"
	streamMethod = "/grpc.testing.TestService/StreamingInputCall"
)

// startRation starts a one-server cluster and a client of it, closed when
// the test ends (before the cluster: cleanups run last-registered first).
func startRation(t *testing.T, cfg client.Config) (*testcluster.Cluster, *client.Client) {
	t.Helper()
	c := testcluster.New(t, 1, testcluster.WithPolicies(policies))
	c.WaitForLeader(t)
	cfg.Servers = []string{c.Config(0).GRPCAddr}
	if cfg.ClientID == "" {
		cfg.ClientID = t.Name()
	}
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return c, cl
}

// warm waits until the client holds a lease on (policy, tenant), without
// spending a token (a cost of 0 spends nothing: Allowed once a lease is
// held, NoLease before).
func warm(t *testing.T, cl *client.Client, policy, tenant string) *client.Limiter {
	t.Helper()
	lim := cl.Limiter(policy, client.Key{"tenant": tenant})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(0); d.Reason == client.NoLease {
			return fmt.Errorf("no lease on %s/%s yet (err %v)", policy, tenant, lim.Err())
		}
		return nil
	})
	return lim
}

// tokens is the application's own credential store: the auth interceptor
// accepts only these bearer tokens.
var tokens = map[string]string{"token-acme": "acme", "token-globex": "globex"}

func authenticate(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	if len(v) == 0 {
		return ctx, nil // anonymous
	}
	tenant, ok := tokens[strings.TrimPrefix(v[0], "Bearer ")]
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "bad token")
	}
	return grpclimit.WithPrincipal(ctx, tenant), nil
}

func authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := authenticate(ss.Context())
	if err != nil {
		return err
	}
	return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

type testService struct {
	testpb.UnimplementedTestServiceServer
	mu    sync.Mutex
	calls map[string]int // handler runs by method
}

func (s *testService) count(m string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[m]++
}

func (s *testService) Calls(m string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[m]
}

func (s *testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.count(emptyMethod)
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.count(unaryMethod)
	return &testpb.SimpleResponse{}, nil
}

// StreamingInputCall reads every message and answers how many bytes came;
// a failed RecvMsg (such as a refused message) ends the stream with its
// error.
func (s *testService) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	s.count(streamMethod)
	var n int32
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(m.GetPayload().GetBody()))
	}
}

type server struct {
	addr   string
	svc    *testService
	conn   *grpc.ClientConn
	test   testpb.TestServiceClient
	health healthpb.HealthClient
	reg    *prometheus.Registry
}

// serve runs a gRPC server on a loopback port with the interceptors (after
// the auth interceptor if auth), the test service and the health service,
// and returns a client connection to it.
func serve(t *testing.T, g *grpclimit.Interceptor, auth bool) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unary := []grpc.UnaryServerInterceptor{g.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{g.StreamServerInterceptor()}
	if auth {
		unary = append([]grpc.UnaryServerInterceptor{authUnary}, unary...)
		stream = append([]grpc.StreamServerInterceptor{authStream}, stream...)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	svc := &testService{}
	testpb.RegisterTestServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	conn := start(t, srv, ln)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g)
	return &server{addr: ln.Addr().String(), svc: svc, conn: conn, test: testpb.NewTestServiceClient(conn), health: healthpb.NewHealthClient(conn), reg: reg}
}

// start serves srv on ln until the test ends, and returns a client
// connection to it.
func start(t *testing.T, srv *grpc.Server, ln net.Listener) *grpc.ClientConn {
	t.Helper()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newInterceptor(t *testing.T, cfg grpclimit.Config) *grpclimit.Interceptor {
	t.Helper()
	g, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// as returns a context whose calls carry tenant's bearer token ("" for
// none).
func as(tenant string) context.Context {
	ctx := context.Background()
	for tok, ten := range tokens {
		if ten == tenant {
			return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		}
	}
	return ctx
}

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 10*time.Second)
}

func (s *server) unary(ctx context.Context) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := s.test.UnaryCall(ctx, &testpb.SimpleRequest{})
	return err
}

func (s *server) empty(ctx context.Context) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := s.test.EmptyCall(ctx, &testpb.Empty{})
	return err
}

// count returns ration_grpc_server_decisions_total for the labels.
func (s *server) count(t *testing.T, policy, method, outcome string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ration_grpc_server_decisions_total" {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			want := map[string]string{"policy": policy, "method": method, "outcome": outcome}
			for _, lp := range m.GetLabel() {
				if want[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// details decodes a status error's RetryInfo and QuotaFailure.
func details(t *testing.T, err error) (*status.Status, *errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a status error: %v", err)
	}
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			if ri != nil {
				t.Errorf("two RetryInfo details")
			}
			ri = d
		case *errdetails.QuotaFailure:
			if qf != nil {
				t.Errorf("two QuotaFailure details")
			}
			qf = d
		case error:
			t.Errorf("undecodable detail: %v", d)
		}
	}
	return st, ri, qf
}
