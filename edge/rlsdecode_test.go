package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// envoyCodec marshals as Envoy does: a string's bytes as they are, UTF-8
// or not (appendRLS; protobuf-go's marshaller refuses them).
type envoyCodec struct{}

func (envoyCodec) Name() string { return "proto" }

func (envoyCodec) Marshal(v any) ([]byte, error) {
	switch r := v.(type) {
	case rawRequest:
		return r, nil
	case *rlspb.RateLimitRequest:
		return appendRLS(nil, r), nil
	}
	return nil, fmt.Errorf("envoyCodec cannot marshal %T", v)
}

func (envoyCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

// rawRequest is a request's wire bytes, sent as they are.
type rawRequest []byte

// appendRLS appends req's wire form, strings as their bytes.
func appendRLS(b []byte, req *rlspb.RateLimitRequest) []byte {
	str := func(b []byte, num protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	msg := func(b []byte, num protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), m)
	}
	b = str(b, 1, req.GetDomain())
	for _, d := range req.GetDescriptors() {
		var db []byte
		for _, en := range d.GetEntries() {
			db = msg(db, 1, str(str(nil, 1, en.GetKey()), 2, en.GetValue()))
		}
		if d.GetLimit() != nil {
			lb, _ := proto.Marshal(d.GetLimit()) // no strings
			db = msg(db, 2, lb)
		}
		if d.GetHitsAddend() != nil {
			hb, _ := proto.Marshal(d.GetHitsAddend())
			db = msg(db, 3, hb)
		}
		if d.GetIsNegativeHits() {
			db = protowire.AppendVarint(protowire.AppendTag(db, 4, protowire.VarintType), 1)
		}
		b = msg(b, 2, db)
	}
	if req.GetHitsAddend() != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(req.GetHitsAddend()))
	}
	return b
}

const rawEnvoy = `
domain: raw
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// TestShouldRateLimitRawBytes: descriptor values that are not UTF-8, as
// Envoy sends a header's bytes, are limited like any other value, each
// its own budget, and never fail the call (which Envoy's default
// failure_mode_deny: false lets through with no limit). Before, every
// such call was answered Internal by grpc-go's decoding, and the request
// passed unlimited, the other descriptors of the call with it.
func TestShouldRateLimitRawBytes(t *testing.T) {
	conf := loadEnvoy(t, rawEnvoy)
	c := startCluster(t, conf.PolicyYAML())
	h := startEdge(t, servers(c), conf, "edge-raw")
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)
	should := func(t *testing.T, req any) (*rlspb.RateLimitResponse, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*testcluster.DefaultWait)
		defer cancel()
		resp := &rlspb.RateLimitResponse{}
		err := h.conn.Invoke(ctx, rlspb.RateLimitService_ShouldRateLimit_FullMethodName, req, resp, grpc.ForceCodec(envoyCodec{}))
		return resp, err
	}
	// admitted sends ds until OVER_LIMIT, at most limit+1 times.
	admitted := func(t *testing.T, limit int, ds ...*ratelimitv3.RateLimitDescriptor) int {
		t.Helper()
		for n := 0; n <= limit; n++ {
			r, err := should(t, &rlspb.RateLimitRequest{Domain: "raw", Descriptors: ds})
			if err != nil {
				t.Fatalf("call %d: %v, want OK or OVER_LIMIT", n+1, err)
			}
			if r.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
				return n
			}
		}
		return limit + 1
	}
	values := []string{"\xff\xfe", "\xfe\xff", "caf\xe9", client.WireKeyValue("\xff\xfe"), strings.Repeat("\xfe", 300), strings.Repeat("v", 300)}
	for _, v := range values {
		if n := admitted(t, 2, desc("tenant="+v)); n != 2 {
			t.Errorf("tenant=%q admitted %d, want 2", v, n)
		}
	}
	// The other descriptors of a call with such a value are still charged.
	if n := admitted(t, 3, desc("ip=10.0.0.1"), desc("tenant=\xff\xfe")); n != 0 {
		t.Errorf("ip with a spent tenant %q: admitted %d, want 0", "\xff\xfe", n)
	}
	if n := admitted(t, 3, desc("ip=10.0.0.1"), desc("tenant=\xf0\x28")); n != 2 {
		t.Errorf("ip with a new tenant %q admitted %d, want 2 (its limit)", "\xf0\x28", n)
	}
	if n := admitted(t, 3, desc("ip=10.0.0.1")); n != 1 {
		t.Errorf("ip alone admitted %d, want 1 (3 less the 2 above)", n)
	}
	// The edge's Check API names the same budget by the wire name.
	pol := conf.Match("raw", []string{"tenant"}, []string{"x"}).Policy
	resp, err := h.adm.Check(context.Background(), &api.CheckRequest{Items: []*api.CheckItem{{Policy: pol, Key: map[string]string{"tenant": client.WireKeyValue("caf\xe9")}}}})
	if err != nil || resp.GetAllowed() {
		t.Errorf("Check of WireKeyValue(%q), spent through Envoy: %v %v, want refused", "caf\xe9", resp, err)
	}
	// A domain or entry key that is not UTF-8 matches no rule: OK.
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "raw\xff", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant=a")}},
		{Domain: "raw", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("ten\xffant=a")}},
	} {
		if r, err := should(t, req); err != nil || r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Errorf("%q: %v %v, want OK", req.GetDomain(), r.GetOverallCode(), err)
		}
	}
	// A descriptor that is no message: InvalidArgument, not Internal.
	// (A request whose own framing is broken is answered Internal by
	// grpc-go before any handler; Envoy never sends one.)
	if _, err := should(t, rawRequest{0x0a, 0x03, 'r', 'a', 'w', 0x12, 0x03, 0x0a, 0x05, 'r'}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("truncated descriptor: %v, want InvalidArgument", err)
	}
	// POST /v1/check is JSON, which is UTF-8 text: bytes that are not are
	// a clear 400, and the wire name reaches the budget.
	resp2, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(`{"items":[{"policy":"`+pol+`","key":{"tenant":"caf`+"\xe9"+`"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	_ = resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "UTF-8") {
		t.Errorf("JSON with a byte that is not UTF-8: %d %s, want 400 naming UTF-8", resp2.StatusCode, body)
	}
	resp2, err = http.Post(h.url+"/v1/check", "application/json", strings.NewReader(`{"items":[{"policy":"`+pol+`","key":{"tenant":"\u0000caf%E9"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp2.Body)
	_ = resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":false`) {
		t.Errorf("JSON with the wire name of a spent value: %d %s, want 200 refused", resp2.StatusCode, body)
	}
}

// FuzzDecodeRLS: decodeRLS never panics, and where protobuf decodes an
// input, decodeRLSLax decodes it to the same fields.
func FuzzDecodeRLS(f *testing.F) {
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "raw", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant=\xff,path=/a")}, HitsAddend: 3},
		{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("a=b"), 7), {IsNegativeHits: true, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 2, UnitMultiplier: wrapperspb.UInt32(4)}}}},
	} {
		f.Add(appendRLS(nil, req))
	}
	f.Add(protowire.AppendTag(nil, 2, protowire.StartGroupType))
	f.Add([]byte{0x0a, 0x05, 'r'})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeRLS(b)
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("decodeRLS: %v, want InvalidArgument", err)
		}
		want := &rlspb.RateLimitRequest{}
		if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, want) != nil {
			return
		}
		if err != nil || got == nil {
			t.Fatalf("protobuf decodes %x, decodeRLS does not: %v", b, err)
		}
		lax, err := decodeRLSLax(b)
		if err != nil {
			t.Fatalf("protobuf decodes %x, decodeRLSLax does not: %v", b, err)
		}
		if !proto.Equal(lax, want) {
			t.Fatalf("%x: decodeRLSLax %v, protobuf %v", b, lax, want)
		}
	})
}

// TestCheckRawBytes: a Check whose key or policy is not UTF-8 (a C++ or
// Java caller's bytes as they are) is INVALID_ARGUMENT naming the cause
// and the fix, where grpc-go's codec answered Internal, which a caller
// that fails open lets through. The same key as its client.WireKeyValue
// is decided (here, without a cluster: no-lease).
func TestCheckRawBytes(t *testing.T) {
	h := startEdge(t, []string{"127.0.0.1:1"}, nil, "edge-raw-check", withFirstLeaseWait(20*time.Millisecond))
	check := func(policy, name, value string) (*api.CheckResponse, error) {
		t.Helper()
		str := func(b []byte, num protowire.Number, s string) []byte {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			return protowire.AppendString(b, s)
		}
		var entry []byte
		entry = str(entry, 1, name)
		entry = str(entry, 2, value)
		var it []byte
		it = str(it, 1, policy)
		it = protowire.AppendTag(it, 2, protowire.BytesType)
		it = protowire.AppendBytes(it, entry)
		req := protowire.AppendTag(nil, 1, protowire.BytesType)
		req = protowire.AppendBytes(req, it)
		ctx, cancel := context.WithTimeout(context.Background(), 2*testcluster.DefaultWait)
		defer cancel()
		resp := &api.CheckResponse{}
		err := h.conn.Invoke(ctx, api.Admission_Check_FullMethodName, rawRequest(req), resp, grpc.ForceCodec(envoyCodec{}))
		return resp, err
	}
	for _, c := range []struct{ policy, name, value string }{
		{"p", "tenant", "\xff\xfe"},
		{"p", "caf\xe9", "v"},
		{"p\xff", "tenant", "a"},
	} {
		_, err := check(c.policy, c.name, c.value)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "WireKeyValue") || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%q %q=%q: %v, want InvalidArgument naming UTF-8 and WireKeyValue", c.policy, c.name, c.value, err)
		}
	}
	r, err := check("p", "tenant", client.WireKeyValue("\xff\xfe"))
	if err != nil || len(r.GetResults()) != 1 || r.GetResults()[0].GetAllowed() {
		t.Errorf("the wire name: %v %v, want one refusal (no cluster)", r, err)
	}
}
