package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/tracing"
)

// TestSpans runs a traced three-server cluster and a traced edge that
// reaches it through a follower, as rationd and rationd edge do with
// OTEL_TRACES_EXPORTER set, and checks the spans an in-memory exporter
// receives: the edge continues the caller's traceparent on gRPC and
// HTTP; the edge's lease calls are spans on both sides with one trace
// ID; the follower's forwarding to the leader is a child span; the Raft
// entry is a span linked to the leader's call; admin calls are spans.
func TestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := testcluster.New(t, 3, testcluster.WithPolicies(`policies:
  - {name: api, algorithm: token-bucket, rate: 10, burst: 10, key: [tenant]}
`), testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.TracerProvider = tp }))
	leader := c.WaitForStableLeader(t)
	follower := c.Followers()[0]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := edge.New(ctx, edge.Config{Servers: []string{follower.GRPCAddr()}, ClientID: "traced-edge", TracerProvider: tp, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gs := grpc.NewServer(tracing.ServerOptions(tp)...)
	e.RegisterGRPC(gs)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.HTTPHandler(nil), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	defer hs.Close()

	// Envoy's call carries a traceparent (its own span is the parent).
	const envoyTrace, envoySpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+envoyTrace+"-"+envoySpan+"-01")
	resp, err := api.NewAdmissionClient(conn).Check(md, &api.CheckRequest{Items: []*api.CheckItem{{Policy: "api", Key: map[string]string{"tenant": "acme"}}}})
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("Check: %v %v", resp, err)
	}
	const httpTrace = "0af7651916cd43dd8448eb211c80319c"
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+hl.Addr().String()+"/v1/check",
		strings.NewReader(`{"items":[{"policy":"api","key":{"tenant":"acme"}}]}`))
	req.Header.Set("traceparent", "00-"+httpTrace+"-b7ad6b7169203331-01")
	hr, err := http.DefaultClient.Do(req)
	if err != nil || hr.StatusCode != 200 {
		t.Fatalf("POST /v1/check: %v %v", hr, err)
	}
	hr.Body.Close()

	leaderID := leader.ID()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		spans := exp.GetSpans()
		var errs []error
		need := func(what string, ok func(s tracetest.SpanStub) bool) {
			for _, s := range spans {
				if ok(s) {
					return
				}
			}
			errs = append(errs, fmt.Errorf("no span %s among %d", what, len(spans)))
		}
		need("Check continuing Envoy's trace", func(s tracetest.SpanStub) bool {
			return s.Name == "ration.v1.Admission/Check" && s.SpanKind == trace.SpanKindServer &&
				s.SpanContext.TraceID().String() == envoyTrace && s.Parent.SpanID().String() == envoySpan
		})
		need("POST /v1/check continuing the HTTP caller's trace", func(s tracetest.SpanStub) bool {
			return s.Name == "POST /v1/check" && s.SpanContext.TraceID().String() == httpTrace
		})
		// The edge's Acquire: a client span, the follower's server span
		// under it, the follower's forwarding client span under that, and
		// the leader's server span under the forwarding one.
		var edgeAcquire []tracetest.SpanStub
		for _, s := range spans {
			if s.Name == "ration.v1.Leases/Acquire" && s.SpanKind == trace.SpanKindClient && !s.Parent.IsValid() {
				edgeAcquire = append(edgeAcquire, s)
			}
		}
		if len(edgeAcquire) == 0 {
			errs = append(errs, errors.New("no root client span of the edge's Acquire"))
		}
		child := func(parent trace.SpanContext, kind trace.SpanKind) (trace.SpanContext, bool) {
			for _, s := range spans {
				if s.Parent.SpanID() == parent.SpanID() && s.SpanKind == kind && s.SpanContext.TraceID() == parent.TraceID() {
					return s.SpanContext, true
				}
			}
			return trace.SpanContext{}, false
		}
		forwarded := false
		for _, root := range edgeAcquire {
			sc, ok := root.SpanContext, true
			for _, kind := range []trace.SpanKind{trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindServer} {
				if sc, ok = child(sc, kind); !ok {
					break
				}
			}
			forwarded = forwarded || ok
		}
		if !forwarded {
			errs = append(errs, errors.New("no Acquire forwarded from the follower to the leader in one trace"))
		}
		need("raft.apply lease-batch on the leader, linked to a call", func(s tracetest.SpanStub) bool {
			if s.Name != "raft.apply lease-batch" || len(s.Links) == 0 {
				return false
			}
			for _, a := range s.Attributes {
				if string(a.Key) == "ration.server" && a.Value.AsString() == leaderID {
					return true
				}
			}
			return false
		})
		need("an admin call (the edge reads the policies)", func(s tracetest.SpanStub) bool {
			return s.Name == "ration.v1.Admin/ListPolicies" && s.SpanKind == trace.SpanKindServer
		})
		return errors.Join(errs...)
	})
}

// TestOffByDefault: no provider installs nothing.
func TestOffByDefault(t *testing.T) {
	if tracing.ServerOptions(nil) != nil || tracing.DialOptions(nil) != nil || tracing.Tracer(nil) != nil {
		t.Error("a nil provider installs something")
	}
	for _, env := range []map[string]string{{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}} {
		tp, stop, err := tracing.FromEnv(context.Background(), "rationd", func(k string) string { return env[k] }, nil)
		if tp != nil || err != nil || stop(context.Background()) != nil {
			t.Errorf("%v: %v %v, want no provider", env, tp, err)
		}
	}
}

// TestFromEnv: the console exporter writes spans; a variable it cannot
// use is an error naming it.
func TestFromEnv(t *testing.T) {
	var out bytes.Buffer
	env := map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "edge-7", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod%2Feu,service.name=ignored"}
	tp, stop, err := tracing.FromEnv(context.Background(), "rationd", func(k string) string { return env[k] }, &out)
	if err != nil || tp == nil {
		t.Fatalf("console: %v %v", tp, err)
	}
	_, span := tracing.Tracer(tp).Start(context.Background(), "probe")
	span.End()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"probe"`) || !strings.Contains(out.String(), "edge-7") || !strings.Contains(out.String(), "prod/eu") || strings.Contains(out.String(), "ignored") {
		t.Errorf("console output lacks the span or the service name:\n%s", out.String())
	}
	for env, want := range map[string]string{
		"OTEL_TRACES_EXPORTER=zipkin":                                     `OTEL_TRACES_EXPORTER="zipkin"`,
		"OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_PROTOCOL=http/json": `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`,
		"OTEL_TRACES_EXPORTER=console OTEL_RESOURCE_ATTRIBUTES=novalue":   `OTEL_RESOURCE_ATTRIBUTES: "novalue"`,
	} {
		vars := map[string]string{}
		for _, kv := range strings.Fields(env) {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		_, _, err := tracing.FromEnv(context.Background(), "rationd", func(k string) string { return vars[k] }, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", env, err, want)
		}
	}
}
