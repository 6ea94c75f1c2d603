package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

const windowDebtPolicies = `
policies:
  - name: monthly
    algorithm: fixed-window
    key: [tenant]
    limit: 10
    window: 3s
    max_debt: 6
`

// windowKey is the leader's listing of monthly/acme (nil: none yet).
func windowKey(t *testing.T, c *testcluster.Cluster) *api.KeyInfo {
	t.Helper()
	resp, err := listLeases(c, t, "monthly")
	if err != nil {
		return nil
	}
	for _, k := range resp.GetKeys() {
		if k.GetKey() == "acme" {
			return k
		}
	}
	return nil
}

// TestWindowChargeBeyondLimit: on a fixed window with max_debt
// (docs/design.md §8.6), a charge after the work beyond the chunk is
// never refused: it takes the chunk below zero, down to its allowance
// (the rest is excess), the chunk admits nothing more, and the debt
// counts in the window where the chunk ends (and any overshoot beyond L
// in the next), as the leader's listing shows. Bad input is an error, an
// absurd cost all excess.
func TestWindowChargeBeyondLimit(t *testing.T) {
	c := startCluster(t, windowDebtPolicies)
	a := newClient(t, client.Config{Servers: servers(c), ClientID: "a"})
	lim := a.Limiter("monthly", map[string]string{"tenant": "acme"})
	waitLease(t, nil, lim)
	// A chunk with units and a second or more before the reset, so the
	// charge lands in this window, in a window that started with no debt
	// (a chunk that ends with its window unreleased counts its whole
	// allowance, so the window after one whose chunks were granted all of
	// L starts with max_debt carried, and its chunks get no allowance).
	testcluster.WaitFor(t, 3*testcluster.DefaultWait, func() error {
		ws, ok := lim.Window()
		if !ok || ws.ResetIn < time.Second || ws.LocalMilli < 1000 {
			return fmt.Errorf("window %+v (ok %v)", ws, ok)
		}
		if k := windowKey(t, c); k == nil || k.GetDebtMilli() != 0 {
			return fmt.Errorf("the window is in debt: %v", k)
		}
		return nil
	})
	if _, err := lim.Charge(-1); err == nil {
		t.Fatal("Charge(-1) on a window: no error")
	}
	res, err := lim.Charge(14) // the chunk holds at most 10
	if err != nil {
		t.Fatal(err)
	}
	if res.DebtMilli <= 0 || res.DebtMilli > 6_000 || res.ChargedMilli+res.ExcessMilli != 14_000 {
		t.Fatalf("a charge of 14 on a chunk of at most 10 with max_debt 6: %+v", res)
	}
	if d := lim.AllowN(1); d.Allowed {
		t.Fatalf("a chunk in debt admitted: %+v", d)
	}
	big, err := lim.Charge(client.MaxCost)
	if err != nil || big.ExcessMilli <= 0 {
		t.Fatalf("Charge(MaxCost) on a window: %+v, %v", big, err)
	}
	// The debt counts in the window where the chunk ends (its release
	// reports it; an expiry, at the window's end, counts the whole
	// allowance): at least what the chunk owed, at most max_debt, in the
	// window's count. (The listing shows a key's window as of its last
	// operation, so which window that is is not checked here:
	// fsm.TestWindowDebtWaitsForItsSwitch checks the carry exactly.)
	var k *api.KeyInfo
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if k = windowKey(t, c); k == nil || k.GetDebtMilli() < res.DebtMilli {
			return fmt.Errorf("the chunk's debt not counted yet: %v", k)
		}
		return nil
	})
	if k.GetDebtMilli() > 6_000 || k.GetWindowCountMilli() < k.GetDebtMilli() {
		t.Fatalf("the window in debt %v: want debt in [%d, 6000] counted", k, res.DebtMilli)
	}
	t.Logf("charge %+v; a window in debt %d, count %d of %d", res, k.GetDebtMilli(), k.GetWindowCountMilli(), k.GetWindowLimitMilli())
}
