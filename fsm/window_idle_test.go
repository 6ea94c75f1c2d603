package fsm

import (
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
)

// TestWindowIdleCarryWaitsForItsSwitch: a key whose chunk a forward
// re-sync let outlive its window, expired with no operation on the key
// since, is not collected with FeatureWindowIdleCarry (its chunk may have
// been spent in the window now current, docs/design.md §8.2,
// "Collection"): a new key beyond max_keys is refused, and the key's next
// grant counts the chunk in that window. Off, as in v0.1.0, the key is
// collected and a fresh one grants the window all of L again.
func TestWindowIdleCarryWaitsForItsSwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := windowsOnHarness(t, 0) // fixed-window "daily": L = 10, W = 2 s
		if on {
			h.enableFeatures(KnownFeatures)
		}
		cmd := windowPolicies("10", "")
		cmd.Policies[0].MaxKeys = 1
		if r := h.apply(CmdApplyPolicies, sec, cmd); r.Err != nil {
			t.Fatal(r.Err)
		}
		// Window [0, 2 s): a chunk of all 10 units until cluster time 2 s.
		g := keyLeaseOf(t, h.batch(sec+sec/2, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
		if g.GetStartMilli() != 10_000 || g.GetTtlNanos() != sec/2 {
			t.Fatalf("first grant: %v", g)
		}
		// A re-sync at 1.6 s steps window time 1 s ahead: [2 s, 4 s) begins
		// while the chunk lives, and its holder spends it there. The chunk
		// expires at 2 s; no expire entry follows.
		at := sec + 6*sec/10
		if r := h.apply(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: h.f.st.windowTime(at) + sec}); r.Err != nil {
			t.Fatal(r.Err)
		}
		// At 2.2 s (window time 3.2 s) a new key needs acme's slot.
		kl := keyLeaseOf(t, h.batch(2*sec+sec/5, wAcquire(caller("b", 1, 1), "other", 100_000)))
		if got := codes.Code(kl.GetError().GetCode()); on != (got == codes.ResourceExhausted) {
			t.Fatalf("switch on %v: a new key beyond max_keys: %v", on, kl)
		}
		if !on {
			// Its chunk back unspent, the new key is idle: acme's slot again.
			h.batch(2*sec+sec/4, wRelease(caller("b", 1, 2), "other", kl.GetGrant().GetLeaseId(), kl.GetGrant().GetStartMilli()))
		}
		g = keyLeaseOf(t, h.batch(2*sec+3*sec/10, wAcquire(caller("a", 1, 2), "acme", 100_000))).GetGrant()
		if on && g.GetStartMilli() != 0 {
			t.Fatalf("switch on: [2 s, 4 s) granted %d beside the 10 units spent in it", g.GetStartMilli())
		}
		if !on && g.GetStartMilli() != 10_000 {
			t.Fatalf("switch off (v0.1.0): the collected key's fresh count granted %d, want all 10000", g.GetStartMilli())
		}
	}
}
