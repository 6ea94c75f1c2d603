package edge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/testcluster"
)

// startCluster starts 3 servers with the given policies and waits for a
// leader that has applied them.
func startCluster(t *testing.T, yaml string) *testcluster.Cluster {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithPolicies(yaml))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	return c
}

func servers(c *testcluster.Cluster) []string {
	var s []string
	for i := range c.Len() {
		s = append(s, c.Config(i).GRPCAddr)
	}
	return s
}

func loadEnvoy(t testing.TB, yaml string) *envoyconf.Config {
	t.Helper()
	conf, err := envoyconf.Load(map[string][]byte{"envoy.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// harness is an edge serving gRPC and HTTP on real loopback sockets, and
// clients of both.
type harness struct {
	e    *Edge
	reg  *prometheus.Registry
	rls  rlspb.RateLimitServiceClient
	adm  api.AdmissionClient
	conn *grpc.ClientConn
	url  string // http://host:port
}

type edgeOpt func(*Config)

func withFirstLeaseWait(d time.Duration) edgeOpt {
	return func(c *Config) { c.FirstLeaseWait = d }
}

// startEdge starts an edge (first-lease wait as long as the cluster may
// take, unless an option says otherwise) with its servers, closed when the
// test ends.
func startEdge(t testing.TB, srv []string, conf *envoyconf.Config, id string, opts ...edgeOpt) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{Servers: srv, ClientID: id, Envoy: conf, FirstLeaseWait: testcluster.DefaultWait, Registerer: reg,
		PolicyRefresh: 200 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))) // as rationd edge
	e.RegisterGRPC(gs)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(gl) }()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.HTTPHandler(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		_ = hs.Close()
		gs.Stop()
		_ = e.Close()
	})
	return &harness{e: e, reg: reg, rls: rlspb.NewRateLimitServiceClient(conn), adm: api.NewAdmissionClient(conn), conn: conn,
		url: "http://" + hl.Addr().String()}
}

// desc builds a descriptor from "k=v,k2=v2".
func desc(entries string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, kv := range strings.Split(entries, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (h *harness) should(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testcluster.DefaultWait)
	defer cancel()
	resp, err := h.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func header(resp *rlspb.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}

// waitOK waits until the descriptor is answered OK: the edge holds its
// key's lease. Each try may spend hits tokens.
func (h *harness) waitOK(t *testing.T, domain string, d *ratelimitv3.RateLimitDescriptor) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if r := h.should(t, domain, 0, d); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("overall %v", r.GetOverallCode())
		}
		return nil
	})
}

// counter reads a metric from the harness's registry (0 if absent).
func (h *harness) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// newClusterClient is an embedded client of the cluster, closed when the
// test ends.
func newClusterClient(t *testing.T, c *testcluster.Cluster, id string) *client.Client {
	t.Helper()
	cl, err := client.New(context.Background(), client.Config{Servers: servers(c), ClientID: id, FirstLeaseWait: testcluster.DefaultWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}
