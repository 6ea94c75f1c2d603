package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/testcluster"
)

// sprayPolicy: max_keys 100, a 3s lease (renew_after 1s), a bucket that
// refills in 1s (burst/rate).
const sprayPolicy = `policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
    lease: {duration: 3s}
    max_keys: 100
`

// postCheck sends one POST /v1/check for tenant and reports whether it
// was allowed, and its reason.
func (h *harness) postCheck(t *testing.T, tenant string) (bool, string) {
	t.Helper()
	body := fmt.Sprintf(`{"items": [{"policy": "per-tenant", "key": {"tenant": %q}}]}`, tenant)
	resp, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST /v1/check: %v", err)
		return false, ""
	}
	defer resp.Body.Close()
	var out struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Reason string `json:"reason"`
		} `json:"results"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Results) != 1 {
		t.Errorf("POST /v1/check: %d %s (%v)", resp.StatusCode, b, err)
		return false, ""
	}
	return out.Allowed, out.Results[0].Reason
}

// TestSprayedTenantsReleased: callers of POST /v1/check send 300 distinct
// tenants, three times the policy's max_keys, once each: the cluster
// refuses keys past max_keys. The edge, refused RESOURCE_EXHAUSTED, stops
// renewing keys with no traffic since their last renewal and releases
// them (Config.PressureKeys), the cluster collects them once their buckets
// refill, and a new tenant is admitted within two renewal intervals plus
// a refill (2·1s + 1s, and 1s for the loaded machine). Before, the edge
// renewed every idle key for its five-minute idle timeout and the new
// tenant was refused all that time.
func TestSprayedTenantsReleased(t *testing.T) {
	c := startCluster(t, sprayPolicy)
	h := startEdge(t, servers(c), nil, "edge-spray", withFirstLeaseWait(50*time.Millisecond))
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)

	var refused atomic.Int64
	var wg sync.WaitGroup
	const sprayers, tenants = 6, 300
	for g := range sprayers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < tenants; i += sprayers {
				if ok, _ := h.postCheck(t, fmt.Sprintf("spray-%d", i)); !ok {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	sprayed := time.Now()
	if refused.Load() == 0 {
		t.Fatalf("no sprayed tenant was refused: the spray never reached max_keys")
	}
	keys := func() int {
		if l := c.Leader(); l != nil {
			return len(l.FSM().Leases("per-tenant", "", 0).GetKeys())
		}
		return -1
	}
	t.Logf("spray done: %d of %d tenants refused, %d keys tracked", refused.Load(), tenants, keys())

	testcluster.WaitFor(t, 10*time.Second, func() error {
		if ok, r := h.postCheck(t, "newcomer"); !ok {
			return fmt.Errorf("newcomer refused (%s) %v after the spray; %d keys tracked", r, time.Since(sprayed), keys())
		}
		return nil
	})
	took := time.Since(sprayed)
	t.Logf("newcomer admitted %v after the spray (%d keys tracked)", took, keys())
	if limit := 4 * time.Second; took > limit {
		t.Fatalf("newcomer admitted %v after the spray, later than %v", took, limit)
	}
}
