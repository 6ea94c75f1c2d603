package grpclimit_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
	"github.com/ration-dev/ration/client/retry"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestRefusalDetails: a Limited call answers RESOURCE_EXHAUSTED whose
// RetryInfo (decoded by the gRPC client) is at least the limiter's
// RetryAfter, rounded up to the millisecond, and whose QuotaFailure names
// the policy and tells nothing of any tenant's state; the handler does not
// run. A cost over the capacity answers RESOURCE_EXHAUSTED without
// RetryInfo. Metrics count by policy, method and outcome.
func TestRefusalDetails(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{
		Client: cl,
		Layers: []grpclimit.Layer{{Policy: "refilling", Key: grpclimit.PrincipalKey("tenant")}},
		Cost:   grpclimit.CostTable(map[string]int64{emptyMethod: 1000}, 1),
	})
	s := serve(t, g, true)
	acme := warm(t, cl, "refilling", "acme")
	warm(t, cl, "refilling", "globex")

	// globex spends a little of its own budget: nothing of it may show in
	// acme's refusal.
	if err := s.unary(as("globex")); err != nil {
		t.Fatal(err)
	}
	// acme's burst is 3 and it refills at 1/s: call until refused.
	var err error
	allowed := 0
	for ; allowed < 50; allowed++ {
		if err = s.unary(as("acme")); err != nil {
			break
		}
	}
	if allowed < 3 {
		t.Errorf("refused after %d calls, want at least the burst of 3", allowed)
	}
	// The limiter's own RetryAfter, read after the refusal, can only be
	// smaller than (or equal to) the one the refusal was built from.
	after := acme.AllowN(1)
	st, ri, qf := details(t, err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code %v (%v), want RESOURCE_EXHAUSTED", st.Code(), err)
	}
	if ri == nil || qf == nil {
		t.Fatalf("details RetryInfo %v, QuotaFailure %v: want both", ri, qf)
	}
	delay := ri.GetRetryDelay().AsDuration()
	if delay <= 0 || delay%time.Millisecond != 0 || delay > 2*time.Second {
		t.Errorf("RetryInfo delay %v: want a whole number of ms in (0, 2s] (one token at 1/s)", delay)
	}
	if !after.Allowed && delay < after.RetryAfter {
		t.Errorf("RetryInfo delay %v < the limiter's RetryAfter %v", delay, after.RetryAfter)
	}
	if len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "refilling" {
		t.Fatalf("QuotaFailure %v, want one violation with subject refilling", qf)
	}
	desc := qf.GetViolations()[0].GetDescription()
	for _, leak := range []string{"acme", "globex", "remaining", "level"} {
		if strings.Contains(desc, leak) || strings.Contains(st.Message(), leak) {
			t.Errorf("refusal %q / %q mentions %q", st.Message(), desc, leak)
		}
	}
	if got := s.svc.Calls(unaryMethod); got != allowed+1 {
		t.Errorf("handler ran %d times, want %d (not for the refused call)", got, allowed+1)
	}

	// Cost 1000 > burst 3: no wait admits it, so no RetryInfo.
	err = s.empty(as("acme"))
	st, ri, qf = details(t, err)
	if st.Code() != codes.ResourceExhausted || ri != nil || qf == nil || qf.GetViolations()[0].GetSubject() != "refilling" {
		t.Errorf("over capacity: %v, RetryInfo %v, QuotaFailure %v; want RESOURCE_EXHAUSTED, no RetryInfo, a QuotaFailure", err, ri, qf)
	}
	if s.svc.Calls(emptyMethod) != 0 {
		t.Error("the over-capacity call ran")
	}

	if got := s.count(t, "refilling", unaryMethod, "allowed"); got != float64(allowed+1) {
		t.Errorf("allowed count %v, want %d", got, allowed+1)
	}
	if got := s.count(t, "refilling", unaryMethod, "limited"); got != 1 {
		t.Errorf("limited count %v, want 1", got)
	}
	if got := s.count(t, "refilling", emptyMethod, "limited"); got != 1 {
		t.Errorf("over-capacity limited count %v, want 1", got)
	}
}

// TestRetryInterceptorHonoursRetryInfo: client/retry's interceptor reads
// the RetryInfo this package sends, end to end over gRPC: a refusal of
// "refilling" (1 token/s) is retried after its RetryInfo delay and then
// admitted; a refusal of "tight" (a refill 1000 s away, more than the
// call's deadline) is not retried.
func TestRetryInterceptorHonoursRetryInfo(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "refilling", Key: grpclimit.PrincipalKey("tenant")}}})
	s := serve(t, g, true)
	gt := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}}})
	st := serve(t, gt, true)
	warm(t, cl, "refilling", "acme")
	warm(t, cl, "tight", "acme")
	for i := 0; i < 3; i++ {
		if err := st.unary(as("acme")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		if err := s.unary(as("acme")); err != nil {
			break
		}
		if i > 50 {
			t.Fatal("never refused")
		}
	}

	// The real clock (the wait is the feature under test), recorded.
	clk := &recordingClock{}
	ic := retry.UnaryClientInterceptor(retry.Policy{MaxAttempts: 3, Clock: clk, Rand: func(int64) int64 { return 0 }},
		retry.IdempotentMethods(unaryMethod))
	dial := func(srv *server) testpb.TestServiceClient {
		conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ic))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return testpb.NewTestServiceClient(conn)
	}
	ctx, cancel := callCtx(as("acme"))
	defer cancel()
	if _, err := dial(s).UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("retried call: %v", err)
	}
	waits := clk.Waits()
	if len(waits) == 0 || waits[0] <= 0 || waits[0]%time.Millisecond != 0 || waits[0] > 2*time.Second {
		t.Errorf("waits %v: want a first wait of the RetryInfo delay, whole ms in (0, 2s]", waits)
	}
	if got := s.count(t, "refilling", unaryMethod, "limited"); got != float64(1+len(waits)) {
		t.Errorf("limited %v, want %d (one per wait, and the first refusal)", got, 1+len(waits))
	}

	clk.reset()
	_, err := dial(st).UnaryCall(ctx, &testpb.SimpleRequest{})
	if status.Code(err) != codes.ResourceExhausted || len(clk.Waits()) != 0 || st.count(t, "tight", unaryMethod, "limited") != 1 {
		t.Errorf("refusal without RetryInfo: %v after waits %v; want RESOURCE_EXHAUSTED, not retried", err, clk.Waits())
	}
}

type recordingClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *recordingClock) Now() time.Time { return time.Now() }

func (c *recordingClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return time.After(d)
}

func (c *recordingClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

func (c *recordingClock) reset() {
	c.mu.Lock()
	c.waits = nil
	c.mu.Unlock()
}

// TestFailClosedUnavailable: once the cluster is gone and the lease has run
// out, a fail-closed policy answers UNAVAILABLE with RetryInfo (the
// limiter's RetryAfter, rounded up), not RESOURCE_EXHAUSTED, and the handler does
// not run.
func TestFailClosedUnavailable(t *testing.T) {
	c, cl := startRation(t, client.Config{RequestTimeout: 200 * time.Millisecond, RenewRetryMax: 250 * time.Millisecond})
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "closed", Key: grpclimit.PrincipalKey("tenant")}}})
	s := serve(t, g, true)
	lim := warm(t, cl, "closed", "acme")
	if err := s.unary(as("acme")); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	var err error
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if err = s.unary(as("acme")); status.Code(err) != codes.Unavailable {
			return fmt.Errorf("call answered %v, not UNAVAILABLE yet", err)
		}
		return nil
	})
	st, ri, qf := details(t, err)
	if !strings.Contains(st.Message(), "closed") {
		t.Errorf("message %q does not name the policy", st.Message())
	}
	// The limiter's own decision, taken later, can only ask for a wait as
	// long or shorter.
	d := lim.AllowN(1)
	if d.Reason != client.Unavailable || ri == nil || ri.GetRetryDelay().AsDuration() < d.RetryAfter || d.RetryAfter <= 0 {
		t.Errorf("RetryInfo %v; the limiter says %+v: want RetryInfo at least its RetryAfter", ri, d)
	}
	if qf != nil {
		t.Errorf("QuotaFailure %v on UNAVAILABLE", qf)
	}
	handled := s.svc.Calls(unaryMethod)
	for i := 0; i < 5; i++ {
		if err := s.unary(as("acme")); status.Code(err) != codes.Unavailable {
			t.Fatalf("after the deadline: %v, want UNAVAILABLE", err)
		}
	}
	if s.svc.Calls(unaryMethod) != handled {
		t.Error("the handler ran for a refused call")
	}
	if got := s.count(t, "closed", unaryMethod, "unavailable"); got < 6 {
		t.Errorf("unavailable count %v, want >= 6", got)
	}
}

// TestNoLeaseUnavailable: before any lease (the cluster is unreachable and
// the client does not wait), calls answer UNAVAILABLE with RetryInfo.
func TestNoLeaseUnavailable(t *testing.T) {
	cl, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "nolease",
		NoFirstLeaseWait: true, RequestTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "closed"}}})
	s := serve(t, g, false)
	err = s.unary(context.Background())
	st, ri, _ := details(t, err)
	if st.Code() != codes.Unavailable || ri == nil || ri.GetRetryDelay().AsDuration() != time.Millisecond {
		t.Errorf("%v with RetryInfo %v: want UNAVAILABLE with 1ms", err, ri)
	}
	if got := s.count(t, "closed", unaryMethod, "unavailable"); got != 1 {
		t.Errorf("unavailable count %v, want 1", got)
	}
}

// TestBypass: methods on the bypass list (exact, or a whole service with
// "/*") are never checked nor counted, even with the budget spent.
func TestBypass(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{
		Client: cl,
		Layers: []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}},
		Bypass: []string{"/grpc.health.v1.Health/*", emptyMethod},
	})
	s := serve(t, g, true)
	warm(t, cl, "tight", "acme")
	for i := 0; i < 3; i++ {
		if err := s.unary(as("acme")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := s.unary(as("acme")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("4th call: %v, want RESOURCE_EXHAUSTED", err)
	}
	for i := 0; i < 20; i++ {
		ctx, cancel := callCtx(as("acme"))
		_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("health check %d: %v", i, err)
		}
		if err := s.empty(as("acme")); err != nil {
			t.Fatalf("bypassed EmptyCall %d: %v", i, err)
		}
	}
	if got := s.count(t, "tight", emptyMethod, "allowed") + s.count(t, "tight", "/grpc.health.v1.Health/Check", "allowed"); got != 0 {
		t.Errorf("bypassed calls counted: %v", got)
	}
}

// TestShadowNeverRejects: a policy configured shadow in the cluster never
// refuses, and its would-be refusals count as "shadow"; a Layer marked
// Shadow never refuses either, even on an enforcing policy and before its
// first lease.
func TestShadowNeverRejects(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "shadowed", Key: grpclimit.PrincipalKey("tenant")}}})
	s := serve(t, g, true)
	warm(t, cl, "shadowed", "acme")
	for i := 0; i < 20; i++ {
		if err := s.unary(as("acme")); err != nil {
			t.Fatalf("call %d under a shadow policy: %v", i, err)
		}
	}
	allowed, shadow := s.count(t, "shadowed", unaryMethod, "allowed"), s.count(t, "shadowed", unaryMethod, "shadow")
	if allowed != 2 || shadow != 18 {
		t.Errorf("allowed %v, shadow %v; want 2 (the burst) and 18", allowed, shadow)
	}

	// Layer.Shadow over "tight" (burst 3), with no lease yet and the
	// client not waiting for one: never refused.
	g2 := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{
		{Policy: "roomy", Key: grpclimit.PrincipalKey("tenant")},
		{Policy: "tight", Key: grpclimit.PrincipalKey("tenant"), Shadow: true},
	}})
	s2 := serve(t, g2, true)
	warm(t, cl, "roomy", "globex")
	for i := 0; i < 10; i++ {
		if err := s2.unary(as("globex")); err != nil {
			t.Fatalf("call %d under a shadow layer: %v", i, err)
		}
	}
	if a, sh := s2.count(t, "tight", unaryMethod, "allowed"), s2.count(t, "tight", unaryMethod, "shadow"); a > 3 || a+sh != 10 || sh < 7 {
		t.Errorf("shadow layer: allowed %v, shadow %v; want at most the burst of 3 allowed, the rest of 10 shadow", a, sh)
	}
	if got := s2.count(t, "roomy", unaryMethod, "allowed"); got != 10 {
		t.Errorf("roomy allowed %v, want 10", got)
	}
}

// TestPrincipalNotFromMetadata: metadata the caller wrote names nobody.
// Without an auth interceptor every caller is anonymous, whatever
// "tenant" metadata it sends, and so shares the anonymous budget; with
// one, only the tenant its token proves gets its own budget.
func TestPrincipalNotFromMetadata(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	var mu sync.Mutex
	var seen []string
	key := func(ctx context.Context, m, principal string) client.Key {
		mu.Lock()
		seen = append(seen, principal)
		mu.Unlock()
		return client.Key{"tenant": principal}
	}
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "tight", Key: key}}})
	spoof := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "tenant", tenant, "x-tenant", tenant,
			"x-principal", tenant, "authorization", "Bearer token-"+tenant)
	}

	noAuth := serve(t, g, false)
	warm(t, cl, "tight", "")
	for i := 0; i < 3; i++ {
		if err := noAuth.unary(spoof("acme")); err != nil {
			t.Fatal(err)
		}
	}
	// The anonymous budget is spent: claiming to be someone else does not
	// buy a fresh one.
	for _, who := range []string{"acme", "globex", "initech"} {
		if err := noAuth.unary(spoof(who)); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("spoofing %q without auth: %v, want RESOURCE_EXHAUSTED (the anonymous budget)", who, err)
		}
	}
	mu.Lock()
	for _, p := range seen {
		if p != "" {
			t.Errorf("principal %q taken from caller metadata", p)
		}
	}
	seen = nil
	mu.Unlock()

	// With the application's auth interceptor, a valid token names its
	// tenant (and only that one).
	withAuth := serve(t, g, true)
	warm(t, cl, "tight", "globex")
	if err := withAuth.unary(as("globex")); err != nil {
		t.Fatalf("authenticated globex: %v", err)
	}
	if err := withAuth.unary(metadata.AppendToOutgoingContext(as("globex"), "tenant", "acme")); err != nil {
		t.Fatalf("authenticated globex with a tenant header: %v", err)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != "globex" || seen[1] != "globex" {
		t.Errorf("principals %q, want globex twice", seen)
	}
	mu.Unlock()
}

// TestStream: a stream is checked once at its start (a refused stream
// never reaches its handler); MessageCost charges each received message,
// and a refused message ends the stream with the refusal.
func TestStream(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	layers := []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}}
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: layers})
	s := serve(t, g, true)
	warm(t, cl, "tight", "acme")

	send := func(s *server, tenant string, msgs int) (*testpb.StreamingInputCallResponse, error) {
		ctx, cancel := callCtx(as(tenant))
		defer cancel()
		st, err := s.test.StreamingInputCall(ctx)
		if err != nil {
			return nil, err
		}
		for i := 0; i < msgs; i++ {
			if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte("xy")}}); err != nil {
				if err == io.EOF {
					break // the server ended the stream; CloseAndRecv says why
				}
				return nil, err
			}
		}
		return st.CloseAndRecv()
	}
	for i := 0; i < 3; i++ {
		resp, err := send(s, "acme", 10)
		if err != nil || resp.GetAggregatedPayloadSize() != 20 {
			t.Fatalf("stream %d: %v, %v; want 20 bytes (10 messages for one check)", i, resp, err)
		}
	}
	_, err := send(s, "acme", 10)
	// tight refills one token per 1000 s: the RetryInfo says so.
	if st, ri, qf := details(t, err); st.Code() != codes.ResourceExhausted || qf == nil || ri == nil || ri.GetRetryDelay().AsDuration() < 900*time.Second {
		t.Errorf("4th stream: %v (RetryInfo %v, QuotaFailure %v), want RESOURCE_EXHAUSTED with a QuotaFailure and a RetryInfo of about 1000 s", err, ri, qf)
	}
	if got := s.svc.Calls(streamMethod); got != 3 {
		t.Errorf("handler ran %d times, want 3", got)
	}

	// Per message: the start costs 1, each message 1; globex's burst of 3
	// covers the start and two messages.
	gm := newInterceptor(t, grpclimit.Config{Client: cl, Layers: layers,
		MessageCost: func(context.Context, string, any) int64 { return 1 }})
	sm := serve(t, gm, true)
	warm(t, cl, "tight", "globex")
	_, err = send(sm, "globex", 5)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("metered stream: %v, want RESOURCE_EXHAUSTED at the third message", err)
	}
	if a, l := sm.count(t, "tight", streamMethod, "allowed"), sm.count(t, "tight", streamMethod, "limited"); a != 3 || l != 1 {
		t.Errorf("metered stream: allowed %v, limited %v; want 3 and 1", a, l)
	}
}

// TestLayers: layers are charged all or nothing; a refused call is
// refunded in the other layers; the refusal names only the refusing
// policy, in QuotaFailure and in the metric label.
func TestLayers(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{
		{Policy: "roomy", Key: grpclimit.PrincipalKey("tenant")},
		{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")},
		{Policy: "tight", Key: func(context.Context, string, string) client.Key { return nil }}, // skipped
	}})
	s := serve(t, g, true)
	roomy := warm(t, cl, "roomy", "acme")
	warm(t, cl, "tight", "acme")
	for i := 0; i < 3; i++ {
		if err := s.unary(as("acme")); err != nil {
			t.Fatal(err)
		}
	}
	before := roomy.AllowN(1) // 1000 - 3 - 1
	for i := 0; i < 5; i++ {
		err := s.unary(as("acme"))
		st, _, qf := details(t, err)
		if st.Code() != codes.ResourceExhausted || len(qf.GetViolations()) != 1 ||
			qf.GetViolations()[0].GetSubject() != "tight" {
			t.Fatalf("refused by tight: %v, QuotaFailure %v", err, qf)
		}
	}
	after := roomy.AllowN(1)
	if after.RemainingMilli != before.RemainingMilli-1000 {
		t.Errorf("roomy went from %d to %d milli-tokens over 5 refused calls and one AllowN(1): refused calls were charged",
			before.RemainingMilli, after.RemainingMilli)
	}
	if a, l := s.count(t, "roomy", unaryMethod, "allowed"), s.count(t, "tight", unaryMethod, "limited"); a != 3 || l != 5 {
		t.Errorf("roomy allowed %v, tight limited %v; want 3 and 5", a, l)
	}
	if n := s.count(t, "roomy+tight", unaryMethod, "limited") + s.count(t, "roomy", unaryMethod, "limited"); n != 0 {
		t.Errorf("refusals by tight counted under another policy label: %v", n)
	}
}

// TestLayersShadowThenRefusal: layers shadowed (shadow in the cluster,
// burst 2), tight (burst 3), roomy. The first layer's would-be refusals
// count as "shadow" although it is not the last layer; the fourth call is
// refused by the middle layer, named alone; the last layer is not charged
// for it.
func TestLayersShadowThenRefusal(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{
		{Policy: "shadowed", Key: grpclimit.PrincipalKey("tenant")},
		{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")},
		{Policy: "roomy", Key: grpclimit.PrincipalKey("tenant")},
	}})
	s := serve(t, g, true)
	warm(t, cl, "shadowed", "globex")
	warm(t, cl, "tight", "globex")
	roomy := warm(t, cl, "roomy", "globex")
	for i := 0; i < 3; i++ {
		if err := s.unary(as("globex")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := s.unary(as("globex"))
	st, _, qf := details(t, err)
	if st.Code() != codes.ResourceExhausted || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "tight" {
		t.Fatalf("refused by tight: %v, QuotaFailure %v", err, qf)
	}
	for _, c := range []struct {
		policy, outcome string
		want            float64
	}{
		{"shadowed", "allowed", 2},
		{"shadowed", "shadow", 2}, // the third call, and the refused fourth
		{"tight", "allowed", 3},
		{"tight", "limited", 1},
		{"roomy", "allowed", 3},
		{"roomy", "limited", 0},
	} {
		if n := s.count(t, c.policy, unaryMethod, c.outcome); n != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.outcome, c.policy, n, c.want)
		}
	}
	if d := roomy.AllowN(1); !d.Allowed || d.RemainingMilli != 996000 {
		t.Errorf("roomy after 3 admitted calls and one refused by tight: AllowN(1) = %+v, want 996000 left", d)
	}
}
