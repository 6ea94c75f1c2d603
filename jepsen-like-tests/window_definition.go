//go:build jepsen && linux

package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/ration-dev/ration/api"
)

// The definition round trip (docs/design.md §8.2, **Changes**, feature
// switch FeatureWindowSpent): a window key's definition changed and back
// within one of its windows resumes that window's count. The run's own
// policy keeps its 3s windows (the window-count checker's arithmetic
// assumes one length); a second window policy, jepsen-side (L =
// sideLimit per hour), is the one changed, under the run's load and
// nemeses, by the harness acting as a client of its own: it spends the
// hour's window on one key, changes the policy to `window: 1s`, asks
// once (the key moves to the new definition at its next use, the hour's
// count carried), waits 6 s (past the chunks' leases), takes a chunk in a
// fresh 1s window, changes the policy back to `window: 1h`, and asks
// again. Units granted in the
// hour after the round trip are a certain violation (granted in the
// hour while it is in force, beyond L: the rule's bound is on grants, so
// the check is on grants, not on admissions). The main workload's
// checkers (window-count, convergence: the spent record is in the state
// hash) must hold throughout.

const (
	sideLimit  = 20
	sidePolicy = "jepsen-side"
)

// definitionCheck is the round trip's outcome, checked with the run.
type definitionCheck struct {
	spent, moved, under1s, after int64 // units granted: to spend the hour, at the move to 1s, 6s later, after the round trip
	sameWindow                   bool  // the hour did not end during the round trip
	refusal                      string
	err                          string
}

func (e *Env) sidePolicyFile(window string) string {
	path := filepath.Join(e.dir, "policies-side-"+window+".yaml")
	y := e.cfg.Policy.yamlKeyed("[tenant]") + fmt.Sprintf(`  - name: %s
    algorithm: fixed-window
    limit: %d
    window: %s
    key: [tenant]
`, sidePolicy, sideLimit, window)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// sideAcquire asks for a chunk on the side key as a new client and
// returns the units granted (0 when refused, the refusal in refusal),
// what the window had left and its reset.
func (e *Env) sideAcquire(client string) (units, remaining, reset int64, refusal string) {
	e.waitFor(30*time.Second, "an answer for the side key", func() error {
		l := e.currentLeader()
		if l == "" {
			return fmt.Errorf("no leader")
		}
		e.mu.Lock()
		conn := e.conns[l]
		e.mu.Unlock()
		if conn == nil {
			return fmt.Errorf("no connection to %s", l)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, rerr := api.NewLeasesClient(conn).Acquire(ctx, &api.AcquireRequest{
			Caller: &api.Caller{ClientId: client, Incarnation: uint64(time.Now().UnixNano()), Seq: 1},
			Keys: []*api.AcquireKey{{Key: &api.Key{Policy: sidePolicy, Attributes: map[string]string{"tenant": "side"}},
				Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: sideLimit * 1000, MaxCostMilli: 1000}}},
		})
		if rerr != nil {
			return rerr
		}
		units, remaining, reset, refusal = 0, -1, 0, ""
		switch ls := resp.GetLeases(); {
		case len(ls) != 1:
			refusal = fmt.Sprintf("%d leases in the answer", len(ls))
		case ls[0].GetGrant() != nil:
			g := ls[0].GetGrant()
			units, remaining, reset = g.GetStartMilli()/1000, g.GetWindowRemainingMilli()/1000, g.GetWindowResetNanos()
		default:
			refusal = ls[0].GetError().String()
		}
		return nil
	})
	return units, remaining, reset, refusal
}

// WindowDefinitionRoundTrip: see the top of this file.
var WindowDefinitionRoundTrip = Nemesis{"window-definition-round-trip", func(e *Env, _ *rand.Rand) string {
	c := &definitionCheck{}
	e.mu.Lock()
	e.definition = c
	e.mu.Unlock()
	e.mustRationctl("policy apply", "-f", e.sidePolicyFile("1h"))
	start := MonoNow()
	var reset0 int64
	for i := 0; i < 3*sideLimit; i++ {
		u, rem, reset, refusal := e.sideAcquire(fmt.Sprintf("side-spend-%d", i))
		c.spent += u
		if i == 0 {
			reset0 = reset
		}
		if refusal != "" {
			c.refusal = refusal
		}
		if rem == 0 {
			break
		}
	}
	e.mustRationctl("policy apply", "-f", e.sidePolicyFile("1s"))
	// A first use moves the key to the 1s windows, carrying the hour's
	// count into the current one. Then, past the spending chunks' 5s
	// leases, a later 1s window starts afresh and grants: nothing live
	// carries the hour's count back, only the rule's record keeps it.
	c.moved, _, _, _ = e.sideAcquire("side-1s-move")
	hold(6 * time.Second)
	c.under1s, _, _, _ = e.sideAcquire("side-1s")
	e.mustRationctl("policy apply", "-f", e.sidePolicyFile("1h"))
	var reset int64
	c.after, _, reset, _ = e.sideAcquire("side-after")
	// The same hour: its end, as the last answer gives it, is where the
	// first put it (to within the real time between them, ρ aside).
	elapsed := MonoNow() - start
	c.sameWindow = reset0 > elapsed && (reset == 0 || reset <= reset0)
	if c.spent < sideLimit {
		c.err = fmt.Sprintf("the hour was not spent: %d of %d granted (last refusal: %s)", c.spent, sideLimit, c.refusal)
	}
	return fmt.Sprintf("%s: window 1h -> 1s -> 1h; %d units granted to spend the hour (L = %d), %d at the move to 1s, %d 6s later, %d in the hour after the change back",
		sidePolicy, c.spent, sideLimit, c.moved, c.under1s, c.after)
}}

// result is the round trip's checker result.
func (c *definitionCheck) result(expect string) CheckerResult {
	res := CheckerResult{Name: "window-definition-round-trip", Expected: expect}
	switch {
	case c.err != "":
		res.Detail = c.err + ": nothing was checked"
	case !c.sameWindow:
		res.OK = true
		res.Detail = "the hour ended during the round trip: nothing was checked"
	default:
		res.OK = c.after == 0
		res.Detail = fmt.Sprintf("%s 1h -> 1s -> 1h within one hour: %d units granted to spend it (L = %d), %d at the move to 1s, %d in a 1s window 6s later, %d in the spent hour after the change back (must be 0)",
			sidePolicy, c.spent, sideLimit, c.moved, c.under1s, c.after)
	}
	return res
}
