package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
)

func TestLeasesShowWindowCounts(t *testing.T) {
	r := &api.ListLeasesResponse{ClusterTimeNanos: 5e9,
		Keys: []*api.KeyInfo{
			{Policy: "bucket", Key: "a", PoolMilli: 1000, RateMilliPerSec: 1000, CapacityMilli: 2000},
			{Policy: "daily", Key: "acme", CapacityMilli: 10_000, WindowStartUnixNanos: 1_767_225_600e9, WindowEndUnixNanos: 1_767_312_000e9,
				WindowCountMilli: 7000, WindowLimitMilli: 10_000},
		},
		Leases: []*api.LeaseInfo{{Policy: "daily", Key: "acme", ClientId: "r1", Incarnation: 1, LeaseId: 3, CapMilli: 4000, StartMilli: 4000, ExpiresInNanos: 2e9}},
	}
	var b bytes.Buffer
	if err := writeLeases(&b, r, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Window counts", "daily", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "7", "10", "r1"} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
	// The window key is not listed as a token pool.
	pools := out[strings.Index(out, "Key pools"):strings.Index(out, "Window counts")]
	if strings.Contains(pools, "daily") {
		t.Errorf("the window key is listed among the pools:\n%s", pools)
	}
	b.Reset()
	if err := writeLeases(&b, r, true); err != nil || !strings.Contains(b.String(), `"window_count_milli": 7000`) {
		t.Errorf("JSON: %v\n%s", err, b.String())
	}
}
