package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tracing"
)

// Service names the gRPC health service reports on (and "" for the whole
// server): NOT_SERVING until the edge has reached the cluster.
var healthServices = []string{"", rlspb.RateLimitService_ServiceDesc.ServiceName, api.Admission_ServiceDesc.ServiceName}

// RegisterGRPC registers Envoy's rate limit service, ration's Admission
// service, the gRPC health service and server reflection on s. The health
// status follows Ready (it changes when Ready does) until the edge is
// closed.
func (e *Edge) RegisterGRPC(s *grpc.Server) {
	s.RegisterService(&rlsServiceDesc, rlsServer{e: e})             // decodes values that are not UTF-8 (rlsdecode.go)
	s.RegisterService(&admissionServiceDesc, admissionServer{e: e}) // answers bytes that are not UTF-8 InvalidArgument (checkdecode.go)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	e.healthMu.Lock()
	e.healths = append(e.healths, hs)
	e.healthMu.Unlock()
	e.updateHealth()
}

// updateHealth sets every registered health server's status from Ready
// (NOT_SERVING for good once the edge is closed).
func (e *Edge) updateHealth() {
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	closed := false
	select {
	case <-e.stop:
		closed = true
	default:
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if !closed && e.Ready() == nil {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, hs := range e.healths {
		for _, n := range healthServices {
			hs.SetServingStatus(n, st)
		}
		if closed {
			hs.Shutdown()
		}
	}
}

// maxCheckBody bounds a POST /v1/check body.
const maxCheckBody = 1 << 20

// HTTPHandler serves POST /v1/check (CheckRequest as JSON, the proto's
// field names in either spelling; the answer is a CheckResponse with
// every field present), GET /metrics from g (nil: none), /livez and
// /readyz.
func (e *Edge) HTTPHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", e.serveCheck)
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := e.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if g != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	return mux
}

func (e *Edge) serveCheck(w http.ResponseWriter, r *http.Request) {
	if tr := tracing.Tracer(e.cfg.TracerProvider); tr != nil {
		// The caller's traceparent, as a gRPC call's is continued.
		ctx, span := tr.Start(tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), "POST /v1/check",
			trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCheckBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, rpcerr.Errorf(codes.InvalidArgument, "body over %d bytes", maxCheckBody))
			return
		}
		writeError(w, http.StatusBadRequest, rpcerr.Errorf(codes.InvalidArgument, "reading the body: %v", err))
		return
	}
	req := &api.CheckRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		e.m.checkInvalid.Add(1)
		writeError(w, http.StatusBadRequest, rpcerr.Errorf(codes.InvalidArgument, "not a CheckRequest: %v", err))
		return
	}
	resp, err := e.Check(r.Context(), req)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition:
			code = http.StatusBadRequest
		case codes.NotFound: // a settle's unknown reservation
			code = http.StatusNotFound
		case codes.ResourceExhausted: // --max-reservations open
			code = http.StatusTooManyRequests
		}
		writeError(w, code, err)
		return
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		writeError(w, http.StatusInternalServerError, rpcerr.Error(codes.Internal, err.Error()))
		return
	}
	// protojson varies its whitespace on purpose; answer a stable form.
	var compact bytes.Buffer
	if json.Compact(&compact, out) == nil {
		out = compact.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(out, '\n'))
}

// writeError answers {"code": "InvalidArgument", "message": "..."}.
func writeError(w http.ResponseWriter, httpCode int, err error) {
	st := status.Convert(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	b, _ := json.Marshal(map[string]string{"code": st.Code().String(), "message": st.Message()})
	_, _ = w.Write(append(b, '\n'))
}
