//go:build ration_faults

package lease

import "testing"

// slotOverrunControl is the deterministic form of the negative control
// "deadline cancel without grace (bound only)": the same history, with the
// client cancelling at the deadline itself, must break the bound, every
// time. (At random, the in-flight count alone catches it in about one
// history in 10 000: too rare for a control that must be caught every run.)
func slotOverrunControl(t *testing.T) {
	n, end, expiry := slotOverrunHistory(t, slotClientFaultCancelNoGrace)
	if n <= 1 {
		t.Fatalf("the checker did not catch the deadline cancel without grace: %d in flight (A's request ends at %d, its lease expires at %d)", n, end, expiry)
	}
	t.Logf("caught as expected: concurrency bound broken: %d in flight > N 1 (A's request ends at %d ns, %d ns after its lease's expiry)", n, end, end-expiry)
}
