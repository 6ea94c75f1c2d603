package edge

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
)

// The edge's own cost per decision, without the network (the method
// called directly), and through a real loopback gRPC socket; bench/'s
// section 5 compares whole systems.

const benchEnvoy = `
domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

func benchEdge(b *testing.B) *harness {
	conf := loadEnvoy(b, benchEnvoy)
	c := testcluster.New(b, 3, testcluster.WithPolicies(conf.PolicyYAML()))
	c.WaitForLeader(b)
	h := startEdge(b, servers(c), conf, "bench-edge")
	testcluster.WaitFor(b, testcluster.DefaultWait, h.e.Ready)
	return h
}

func benchRequest() *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "hot", Value: "t"}}}}}
}

func BenchmarkShouldRateLimitInProcess(b *testing.B) {
	h := benchEdge(b)
	req := benchRequest()
	if r, err := h.e.ShouldRateLimit(context.Background(), req); err != nil || r.GetOverallCode() != rlspb.RateLimitResponse_OK {
		b.Fatalf("%v %v", r, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.e.ShouldRateLimit(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	h := benchEdge(b)
	req := benchRequest()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.rls.ShouldRateLimit(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkCheckInProcess(b *testing.B) {
	h := benchEdge(b)
	req := &api.CheckRequest{Items: []*api.CheckItem{{Policy: "bench.hot", Key: map[string]string{"hot": "t"}}}}
	if r, err := h.e.Check(context.Background(), req); err != nil || !r.GetAllowed() {
		b.Fatalf("%v %v", r, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.e.Check(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckReserveSettleGRPC: a reserve and its settle (two Check
// calls over loopback gRPC, one decision) against a plain Check
// (BenchmarkCheckGRPC): the cost of a cost known only after the work.
func BenchmarkCheckReserveSettleGRPC(b *testing.B) {
	h := benchEdge(b)
	benchReserveSettle(b, func(ctx context.Context, req *api.CheckRequest) (*api.CheckResponse, error) {
		return h.adm.Check(ctx, req)
	})
}

// benchReserveSettle reserves 2 and settles at 1 through check, in
// parallel.
func benchReserveSettle(b *testing.B, check func(context.Context, *api.CheckRequest) (*api.CheckResponse, error)) {
	key := map[string]string{"hot": "t"}
	reserve := &api.CheckRequest{Items: []*api.CheckItem{{Policy: "bench.hot", Key: key, Cost: 2, Reserve: true}}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := check(context.Background(), reserve)
			if err != nil || r.GetResults()[0].GetReservation() == "" {
				b.Errorf("reserve: %v %v", r, err)
				return
			}
			settle := &api.CheckRequest{Items: []*api.CheckItem{{Policy: "bench.hot", Key: key,
				Settle: &api.Settle{Reservation: r.GetResults()[0].GetReservation(), Actual: 1}}}}
			if _, err := check(context.Background(), settle); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckGRPC: one plain Check over loopback gRPC.
func BenchmarkCheckGRPC(b *testing.B) {
	h := benchEdge(b)
	req := &api.CheckRequest{Items: []*api.CheckItem{{Policy: "bench.hot", Key: map[string]string{"hot": "t"}}}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.adm.Check(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckReserveSettleInProcess: a reserve and its settle with the
// method called directly, against BenchmarkCheckInProcess.
func BenchmarkCheckReserveSettleInProcess(b *testing.B) {
	h := benchEdge(b)
	benchReserveSettle(b, h.e.Check)
}
