package client_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

const sparsePolicy = `policies:
  - name: sparse
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant]
    lease: {duration: 1500ms}
`

// TestPressureReleasesUnusedKeys: a client holding more keys than
// Config.PressureKeys (4) releases, at their renewal, the keys nothing was
// offered on since their last renewal until it holds no more than 4, and
// keeps renewing the key in use (docs/security.md#tenant-isolation).
func TestPressureReleasesUnusedKeys(t *testing.T) {
	c := startCluster(t, sparsePolicy)
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}
	cl := newClient(t, client.Config{Servers: servers, ClientID: "sparse-1", PressureKeys: 4})
	busy := cl.Limiter("sparse", client.Key{"tenant": "busy"})
	waitLease(t, nil, busy)
	for i := range 10 {
		waitLease(t, nil, cl.Limiter("sparse", client.Key{"tenant": fmt.Sprintf("idle-%d", i)}))
	}
	stop, done := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-done }()
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				busy.Allow()
			}
		}
	}()
	leased := func(prefix string) int {
		l := c.Leader()
		if l == nil {
			return -1
		}
		n := 0
		for _, le := range l.FSM().Leases("sparse", "", 0).GetLeases() {
			if strings.HasPrefix(le.GetKey(), prefix) {
				n++
			}
		}
		return n
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := leased("idle-"); n != 3 {
			return fmt.Errorf("%d idle keys leased, want 3 (4 keys in all)", n)
		}
		return nil
	})
	if n := leased("busy"); n != 1 {
		t.Fatalf("the key in use holds %d leases, want its one", n)
	}
}
