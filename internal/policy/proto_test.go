package policy

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/ration-dev/ration/api"
)

// TestProtoRoundTrip: Parse -> ToProto -> Marshal -> Unmarshal ->
// FromProto gives the parsed policy back (Line aside, and an empty key list
// comes back nil).
func TestProtoRoundTrip(t *testing.T) {
	var all []Policy
	all = append(all, mustParse(t, fullExample).Policies...)
	all = append(all, mustParse(t, clusterExample).Policies...)
	for _, p := range all {
		t.Run(p.Name, func(t *testing.T) {
			spec := p.ToProto()
			direct, err := FromProto(spec)
			if err != nil {
				t.Fatalf("FromProto(ToProto): %v", err)
			}
			b, err := marshalDeterministic(spec)
			if err != nil {
				t.Fatal(err)
			}
			var back api.PolicySpec
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			got, err := FromProto(&back)
			if err != nil {
				t.Fatalf("FromProto(unmarshalled): %v", err)
			}
			want := stripForCompare([]Policy{p})[0]
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
			if !reflect.DeepEqual(direct, want) {
				t.Fatalf("direct round trip:\n got %+v\nwant %+v", direct, want)
			}
			// The spec re-encodes to the same bytes.
			b2, err := marshalDeterministic(got.ToProto())
			if err != nil || !bytes.Equal(b, b2) {
				t.Fatalf("re-marshalled spec differs: %v", err)
			}
		})
	}
}

// marshalDeterministic encodes spec as the cluster's log does (fsm).
func marshalDeterministic(spec *api.PolicySpec) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(spec)
}

// TestToProtoCopies: the spec shares no slice or map with the policy.
func TestToProtoCopies(t *testing.T) {
	p := mustParse(t, clusterExample).Policies[0]
	spec := p.ToProto()
	spec.Key[0] = "changed"
	spec.ClientWeights["replica-a"] = 99
	if p.Key[0] != "tenant" || p.ClientWeights["replica-a"] != 2 {
		t.Fatal("ToProto shares memory with the policy")
	}
	q, err := FromProto(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.ClientWeights["replica-b"] = 77
	if q.ClientWeights["replica-b"] != 1 {
		t.Fatal("FromProto shares memory with the spec")
	}
}

// validSpec is a valid token-bucket spec with every field set.
func validSpec() *api.PolicySpec {
	return &api.PolicySpec{
		Name: "p", Algorithm: "token-bucket", RateMilliPerSec: 10_000, BurstMilli: 20_000, StartFull: true,
		Charge: "requests", Key: []string{"tenant"},
		LeaseDurationNanos: int64(5 * time.Second), RenewAfterNanos: int64(time.Second), DriftPpm: 1000,
		DefaultWeight: 1, ClientWeights: map[string]int64{"a": 2},
		FailureMode: "fail-open", FallbackRateMilliPerSec: 5000,
		Shadow: true, MaxKeys: 100, MaxLeasesPerKey: 10,
	}
}

// validWindowSpec is a valid window spec.
func validWindowSpec() *api.PolicySpec {
	return &api.PolicySpec{Name: "w", Algorithm: "fixed-window", LimitMilli: 5000, WindowNanos: int64(time.Second),
		Charge: "cost", MaxKeys: 1, MaxLeasesPerKey: 1}
}

// TestFromProtoRejects: a spec that fails validation is an error naming
// the field, wrapping ErrInvalidPolicy, never a panic.
func TestFromProtoRejects(t *testing.T) {
	if _, err := FromProto(validSpec()); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	if _, err := FromProto(validWindowSpec()); err != nil {
		t.Fatalf("valid window spec: %v", err)
	}
	if _, err := FromProto(nil); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("nil spec: %v", err)
	}
	cases := []struct {
		name   string
		window bool
		mutate func(*api.PolicySpec)
		field  string
	}{
		{"empty spec", false, func(s *api.PolicySpec) { proto.Reset(s) }, "name"},
		{"bad name", false, func(s *api.PolicySpec) { s.Name = "Bad Name" }, "name"},
		{"unknown algorithm", false, func(s *api.PolicySpec) { s.Algorithm = "leaky-bucket" }, "algorithm"},
		{"bad charge", false, func(s *api.PolicySpec) { s.Charge = "" }, "charge"},
		{"reserved key", false, func(s *api.PolicySpec) { s.Key = []string{"cost"} }, "key"},
		{"duplicate key", false, func(s *api.PolicySpec) { s.Key = []string{"a", "a"} }, "key"},
		{"empty key attribute", false, func(s *api.PolicySpec) { s.Key = []string{" "} }, "key"},
		{"zero rate", false, func(s *api.PolicySpec) { s.RateMilliPerSec = 0 }, "rate"},
		{"rate too large", false, func(s *api.PolicySpec) { s.RateMilliPerSec = MaxRate*1000 + 1 }, "rate"},
		{"burst below one", false, func(s *api.PolicySpec) { s.BurstMilli = 999 }, "burst"},
		{"limit on bucket", false, func(s *api.PolicySpec) { s.LimitMilli = 1000 }, "limit"},
		{"window on bucket", false, func(s *api.PolicySpec) { s.WindowNanos = 1 }, "window"},
		{"no lease duration", false, func(s *api.PolicySpec) { s.LeaseDurationNanos = 0 }, "lease.duration"},
		{"lease too long", false, func(s *api.PolicySpec) { s.LeaseDurationNanos = int64(25 * time.Hour) }, "lease.duration"},
		{"no renew", false, func(s *api.PolicySpec) { s.RenewAfterNanos = 0 }, "lease.renew_after"},
		{"renew past span", false, func(s *api.PolicySpec) { s.RenewAfterNanos = s.LeaseDurationNanos }, "lease.renew_after"},
		{"negative drift", false, func(s *api.PolicySpec) { s.DriftPpm = -1 }, "lease.drift_ppm"},
		{"drift too large", false, func(s *api.PolicySpec) { s.DriftPpm = 100_001 }, "lease.drift_ppm"},
		{"zero default weight", false, func(s *api.PolicySpec) { s.DefaultWeight = 0 }, "weights.default"},
		{"zero client weight", false, func(s *api.PolicySpec) { s.ClientWeights["a"] = 0 }, "weights.clients.a"},
		{"client weight too large", false, func(s *api.PolicySpec) { s.ClientWeights["a"] = MaxWeight + 1 }, "weights.clients.a"},
		{"empty client ID", false, func(s *api.PolicySpec) { s.ClientWeights[""] = 1 }, "weights.clients"},
		{"long client ID", false, func(s *api.PolicySpec) { s.ClientWeights[strings.Repeat("c", 257)] = 1 }, "weights.clients"},
		{"no failure mode", false, func(s *api.PolicySpec) { s.FailureMode = "" }, "failure"},
		{"fail-open without fallback", false, func(s *api.PolicySpec) { s.FallbackRateMilliPerSec = 0 }, "fallback_rate"},
		{"fallback above rate", false, func(s *api.PolicySpec) { s.FallbackRateMilliPerSec = s.RateMilliPerSec + 1 }, "fallback_rate"},
		{"fallback with fail-closed", false, func(s *api.PolicySpec) { s.FailureMode = "fail-closed" }, "fallback_rate"},
		{"zero max keys", false, func(s *api.PolicySpec) { s.MaxKeys = 0 }, "max_keys"},
		{"max keys too large", false, func(s *api.PolicySpec) { s.MaxKeys = MaxKeysLimit + 1 }, "max_keys"},
		{"zero max leases", false, func(s *api.PolicySpec) { s.MaxLeasesPerKey = 0 }, "max_leases_per_key"},
		{"max leases too large", false, func(s *api.PolicySpec) { s.MaxLeasesPerKey = MaxLeasesPerKeyLimit + 1 }, "max_leases_per_key"},

		{"window: fractional limit", true, func(s *api.PolicySpec) { s.LimitMilli = 1500 }, "limit"},
		{"window: zero window", true, func(s *api.PolicySpec) { s.WindowNanos = 0 }, "window"},
		{"window: rate", true, func(s *api.PolicySpec) { s.RateMilliPerSec = 1000 }, "rate"},
		{"window: start", true, func(s *api.PolicySpec) { s.StartFull = true }, "start"},
		{"window: lease duration", true, func(s *api.PolicySpec) { s.LeaseDurationNanos = int64(time.Second) }, "lease.duration"},
		{"window: renew", true, func(s *api.PolicySpec) { s.RenewAfterNanos = 1 }, "lease.renew_after"},
		{"window: drift", true, func(s *api.PolicySpec) { s.DriftPpm = 1 }, "lease.drift_ppm"},
		{"window: weight", true, func(s *api.PolicySpec) { s.DefaultWeight = 1 }, "weights.default"},
		{"window: client weights", true, func(s *api.PolicySpec) { s.ClientWeights = map[string]int64{"a": 1} }, "weights.clients"},
		{"window: failure", true, func(s *api.PolicySpec) { s.FailureMode = "fail-closed" }, "failure"},
		{"window: fallback", true, func(s *api.PolicySpec) { s.FallbackRateMilliPerSec = 1 }, "fallback_rate"},
		{"window: zero max keys", true, func(s *api.PolicySpec) { s.MaxKeys = 0 }, "max_keys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := validSpec()
			if c.window {
				spec = validWindowSpec()
			}
			c.mutate(spec)
			p, err := FromProto(spec)
			if err == nil {
				t.Fatalf("accepted %+v", p)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("does not wrap ErrInvalidPolicy: %v", err)
			}
			if !reflect.DeepEqual(p, Policy{}) {
				t.Errorf("returned a policy with the error: %+v", p)
			}
			found := false
			for _, e := range Errors(err) {
				if e.Field == c.field && strings.Contains(e.Error(), fmt.Sprintf("field %q", c.field)) {
					found = true
				}
			}
			if !found {
				t.Errorf("no error on field %q: %v", c.field, err)
			}
		})
	}
}

// TestValidateAgreesWithParse: Validate accepts everything Parse accepts,
// and reports the policy's line when it has one.
func TestValidateAgreesWithParse(t *testing.T) {
	for _, src := range []string{fullExample, clusterExample} {
		for _, p := range mustParse(t, src).Policies {
			if err := Validate(p); err != nil {
				t.Errorf("%s: %v", p.Name, err)
			}
		}
	}
	p := mustParse(t, clusterExample).Policies[0]
	p.MaxKeys = 0
	err := Validate(p)
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Line != 2 || !strings.HasPrefix(errs[0].Error(), `line 2: policy "inventory-write": field "max_keys": 0 is less than the minimum 1; want`) {
		t.Fatalf("got %v", err)
	}
}

// TestRoundTripsProperty generates valid token-bucket cluster settings and
// checks both round trips (YAML and protobuf) and Validate. A renew_after
// under MinRenewAfter is valid stored (a policy applied before the
// minimum existed restores) but refused when parsed, naming the field.
func TestRoundTripsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := Policy{
			Name: "p", Algorithm: TokenBucket, Charge: ChargeRequests,
			RateMilliPerSec:    rapid.Int64Range(1, MaxRate*1000).Draw(t, "rate"),
			BurstMilli:         rapid.Int64Range(1000, MaxBurst*1000).Draw(t, "burst"),
			StartFull:          rapid.Bool().Draw(t, "startFull"),
			Key:                rapid.SliceOfDistinct(rapid.SampledFrom([]string{"tenant", "route", "region"}), rapid.ID[string]).Draw(t, "key"),
			LeaseDurationNanos: rapid.Int64Range(int64(MinLeaseDuration), int64(MaxLeaseDuration)).Draw(t, "duration"),
			DriftPPM:           rapid.Int64Range(0, MaxDriftPPM).Draw(t, "drift"),
			DefaultWeight:      rapid.Int64Range(1, MaxWeight).Draw(t, "defaultWeight"),
			ClientWeights:      rapid.MapOf(rapid.StringMatching(`[a-z0-9:"' /.<~#&*!-]{1,20}`), rapid.Int64Range(1, MaxWeight)).Draw(t, "clients"),
			Failure:            rapid.SampledFrom([]FailureMode{FailClosed, FailOpen}).Draw(t, "failure"),
			Shadow:             rapid.Bool().Draw(t, "shadow"),
			MaxKeys:            rapid.Int64Range(1, MaxKeysLimit).Draw(t, "maxKeys"),
			MaxLeasesPerKey:    rapid.Int64Range(1, MaxLeasesPerKeyLimit).Draw(t, "maxLeases"),
		}
		p.RenewAfterNanos = rapid.Int64Range(1, usableSpan(p.LeaseDurationNanos, p.DriftPPM)-1).Draw(t, "renew")
		if len(p.Key) == 0 {
			p.Key = nil
		}
		if len(p.ClientWeights) == 0 {
			p.ClientWeights = nil
		}
		if p.Failure == FailOpen {
			p.FallbackRateMilliPerSec = rapid.Int64Range(1, p.RateMilliPerSec).Draw(t, "fallback")
		}
		if err := Validate(p); err != nil {
			t.Fatalf("Validate: %v", err)
		}

		got, err := FromProto(p.ToProto())
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Fatalf("proto round trip: %v\n got %+v\nwant %+v", err, got, p)
		}

		var buf bytes.Buffer
		if err := (&File{Policies: []Policy{p}}).Encode(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := Parse(&buf)
		if p.RenewAfterNanos < int64(MinRenewAfter) {
			errs := Errors(err)
			if len(errs) != 1 || errs[0].Field != fLeaseRenewAfter || !strings.Contains(errs[0].Msg, "is shorter than the minimum 10ms") {
				t.Fatalf("re-parse of renew_after %v: %v, want its refusal", time.Duration(p.RenewAfterNanos), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		got = f.Policies[0]
		got.Line = 0
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("YAML round trip:\n got %+v\nwant %+v", got, p)
		}
	})
}
