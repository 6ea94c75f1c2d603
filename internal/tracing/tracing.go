// Package tracing sets up OpenTelemetry traces for rationd, rationd edge
// and the client (docs/operations.md, "Tracing").
//
// Tracing is off unless configured: a nil trace.TracerProvider (the
// default of coordinator.Config, client.Config and edge.Config) installs
// nothing, so an untraced process pays nothing. With one, every gRPC call
// of the lease, admin and Check APIs is a span on both sides (otelgrpc),
// W3C trace context travels in the calls' metadata (so the edge continues
// the trace of Envoy's call), a follower's forwarding to the leader is a
// child span, and each Raft entry of coalesced lease operations is a span
// linked to the calls it carries. Admission decisions (Limiter.AllowN)
// make no spans: they are local and take nanoseconds.
//
// FromEnv reads the standard OTEL_* variables, so rationd and the edge are
// configured like any OpenTelemetry SDK.
package tracing

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Propagator is the trace context ration reads and writes: W3C
// traceparent/tracestate and baggage, as Envoy and the OpenTelemetry SDKs
// send them.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// ScopeName names ration's own spans' instrumentation scope.
const ScopeName = "github.com/ration-dev/ration"

// FromEnv returns the tracer provider the OTEL_* variables describe for
// a process named service (OTEL_SERVICE_NAME overrides it), and the
// function that flushes and stops it; a nil provider when tracing is off:
// OTEL_TRACES_EXPORTER unset or "none", or OTEL_SDK_DISABLED=true.
//
// OTEL_TRACES_EXPORTER is a comma-separated list of "otlp" (with
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
// "http/protobuf", the default, or "grpc"; endpoint, headers, TLS and
// timeout from the exporters' own OTEL_EXPORTER_OTLP_* variables) and
// "console" (spans as JSON lines on console). Sampling follows
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on),
// and OTEL_RESOURCE_ATTRIBUTES adds resource attributes. An exporter or
// protocol it does not know is an error naming the variable.
func FromEnv(ctx context.Context, service string, getenv func(string) string, console io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, noop, nil
	}
	var opts []sdktrace.TracerProviderOption
	for _, name := range strings.Split(getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch name = strings.TrimSpace(name); name {
		case "", "none":
		case "otlp":
			proto := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
			var exp sdktrace.SpanExporter
			var err error
			switch proto {
			case "", "http/protobuf":
				exp, err = otlptracehttp.New(ctx)
			case "grpc":
				exp, err = otlptracegrpc.New(ctx)
			default:
				return nil, noop, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", proto)
			}
			if err != nil {
				return nil, noop, fmt.Errorf("OTEL_TRACES_EXPORTER=otlp: %w", err)
			}
			opts = append(opts, sdktrace.WithBatcher(exp))
		case "console":
			exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
			if err != nil {
				return nil, noop, fmt.Errorf("OTEL_TRACES_EXPORTER=console: %w", err)
			}
			opts = append(opts, sdktrace.WithSyncer(exp))
		default:
			return nil, noop, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", name)
		}
	}
	if len(opts) == 0 {
		return nil, noop, nil
	}
	attrs, err := resourceAttrs(service, getenv)
	if err != nil {
		return nil, noop, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK())
	if err != nil {
		return nil, noop, fmt.Errorf("tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	return tp, tp.Shutdown, nil
}

// resourceAttrs are OTEL_RESOURCE_ATTRIBUTES (key=value pairs separated
// by commas, values percent-encoded) and service.name: OTEL_SERVICE_NAME,
// else that list's, else service.
func resourceAttrs(service string, getenv func(string) string) ([]attribute.KeyValue, error) {
	var attrs []attribute.KeyValue
	name := service
	if list := strings.TrimSpace(getenv("OTEL_RESOURCE_ATTRIBUTES")); list != "" {
		for _, kv := range strings.Split(list, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", kv)
			}
			val, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q: %w", kv, err)
			}
			if k == "service.name" {
				name = val
				continue
			}
			attrs = append(attrs, attribute.String(k, val))
		}
	}
	if n := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); n != "" {
		name = n
	}
	return append(attrs, attribute.String("service.name", name)), nil
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// ServerOptions traces a gRPC server's calls with tp; none when tp is nil.
func ServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if tp == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator)))}
}

// DialOptions traces a gRPC client's calls with tp; none when tp is nil.
func DialOptions(tp trace.TracerProvider) []grpc.DialOption {
	if tp == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator)))}
}

// Tracer is ration's tracer from tp, or nil when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}
