package lease

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// The model of debt on leased fixed windows (docs/design.md §8.6). One to
// three holders of a key take chunks, admit from them (a cost admitted only
// while the chunk holds it), charge after the work (down to −allowance;
// what goes beyond is excess, recorded apart and not covered), renew,
// release (reporting what is unspent and the debt), crash (a new
// incarnation revokes) or re-acquire (a replacement), while the ledger
// expires chunks at random times. Clocks are exact (window time = cluster
// time; the clock rules are TestLeasedWindowKeepsBound's and do not touch
// debt). Every cost counts in the window in which it settles, and the
// checker demands, per window, settled ≤ L + D, and over every run of m
// consecutive windows, settled ≤ m·L + D.

type wdClient struct {
	inc      uint64
	seq      uint64
	lease    LeaseID // 0: none
	level    int64
	floor    int64 // −allowance
	deadline int64
}

const (
	wdW    = int64(1_000_000_000) // 1 s windows
	wdTTL  = int64(300_000_000)
	wdUnit = MilliPerToken
)

// windowDebtModel runs one history against a ledger broken by fault (none:
// windowFaultNone) and returns the checker's complaint, or "".
func windowDebtModel(t *rapid.T, fault WindowFault) string {
	L := rapid.Int64Range(1, 20).Draw(t, "L") * wdUnit
	D := rapid.Int64Range(0, 30).Draw(t, "D") * wdUnit
	l, err := NewWindowLedger(WindowLedgerConfig{LimitMilli: L, Spec: WindowSpec{FixedNanos: wdW}, MaxDebtMilli: D})
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(fault)
	n := rapid.IntRange(1, 3).Draw(t, "holders")
	cs := make([]*wdClient, n)
	for i := range cs {
		cs[i] = &wdClient{inc: 1}
	}
	now := int64(1)
	settled := map[int64]int64{} // window start → settled cost (excess left out)
	settle := func(c int64) { settled[now/wdW*wdW] += c }
	ok := func(err error) {
		if err != nil && !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrLeaseExpired) && !errors.Is(err, ErrStaleGrant) && !errors.Is(err, ErrTooManyLeases) {
			t.Fatalf("unexpected ledger error: %v", err)
		}
	}
	steps := rapid.IntRange(1, 200).Draw(t, "steps")
	for range steps {
		i := rapid.IntRange(0, n-1).Draw(t, "who")
		c := cs[i]
		id := fmt.Sprintf("c%d", i)
		if c.lease != 0 && now >= c.deadline {
			c.lease = 0 // the chunk lapsed: its holder stops using it
		}
		switch rapid.IntRange(0, 8).Draw(t, "op") {
		case 0: // grant (a replacement if it holds one)
			c.seq++
			g, err := l.Grant(now, now, WindowGrantRequest{ClientID: id, Incarnation: c.inc, Seq: c.seq,
				AskMilli: rapid.Int64Range(0, 10).Draw(t, "ask") * wdUnit, TTLNanos: wdTTL})
			ok(err)
			if err == nil {
				c.lease, c.level, c.floor, c.deadline = g.LeaseID, g.ChunkMilli, -g.DebtAllowanceMilli, now+g.TTLNanos
			}
		case 1: // renew
			if c.lease == 0 {
				continue
			}
			g, err := l.Renew(now, now, WindowRenewRequest{ClientID: id, Incarnation: c.inc, LeaseID: c.lease,
				AskMilli: rapid.Int64Range(0, 10).Draw(t, "ask") * wdUnit, TTLNanos: wdTTL})
			ok(err)
			if err != nil {
				c.lease = 0
				continue
			}
			c.level += g.ChunkMilli
			c.deadline = max(c.deadline, now+g.TTLNanos)
		case 2, 3: // admit
			cost := rapid.Int64Range(1, 5).Draw(t, "cost") * wdUnit
			if c.lease != 0 && c.level >= cost {
				c.level -= cost
				settle(cost)
			}
		case 4, 5: // charge after the work
			cost := rapid.Int64Range(1, 15).Draw(t, "charge") * wdUnit
			if c.lease != 0 {
				taken := min(cost, c.level-c.floor)
				c.level -= taken
				settle(taken) // the rest is excess: named, not covered
			}
		case 6: // release
			if c.lease == 0 {
				continue
			}
			_, err := l.ReleaseDebt(now, now, id, c.inc, c.lease, max(c.level, 0), max(-c.level, 0))
			ok(err)
			c.lease = 0
		case 7: // crash: a new incarnation revokes the old one's chunks
			c.lease = 0
			c.inc++
			l.Revoke(id, c.inc)
		case 8:
			_, err := l.Expire(now, now)
			ok(err)
		}
		if f := checkWindowDebtLedger(l, fault); f != "" {
			return f
		}
		now += rapid.Int64Range(1, 400).Draw(t, "dt") * 1_000_000
	}
	// Past every chunk's end.
	now += wdW + wdTTL
	if _, err := l.Expire(now, now); err != nil {
		t.Fatal(err)
	}
	return checkWindowDebtBound(settled, L, D)
}

// checkWindowDebtLedger checks rule (w1)'s invariant: the window's debt
// plus the live chunks' allowances never exceed D.
func checkWindowDebtLedger(l *WindowLedger, fault WindowFault) string {
	if fault != windowFaultNone {
		return "" // a control must be caught by the bound
	}
	held := l.s.DebtMilli
	for _, le := range l.s.Leases {
		held += le.DebtAllowanceMilli
	}
	if held > l.cfg.MaxDebtMilli || l.s.DebtMilli > l.s.CountMilli {
		return fmt.Sprintf("debt %d + allowances = %d over D = %d (count %d)", l.s.DebtMilli, held, l.cfg.MaxDebtMilli, l.s.CountMilli)
	}
	return ""
}

// checkWindowDebtBound demands ≤ L + D settled in every window and ≤ m·L +
// D over every m consecutive windows.
func checkWindowDebtBound(settled map[int64]int64, L, D int64) string {
	var first, last int64 = -1, 0
	for s := range settled {
		if first < 0 || s < first {
			first = s
		}
		last = max(last, s)
	}
	for a := first; a >= 0 && a <= last; a += wdW {
		var sum int64
		for b := a; b <= last; b += wdW {
			sum += settled[b]
			m := (b-a)/wdW + 1
			if sum > m*L+D {
				return fmt.Sprintf("settled %d over %d windows from %d, over m·L + D = %d (L %d, D %d)", sum, m, a, m*L+D, L, D)
			}
		}
	}
	return ""
}

// TestWindowDebtKeepsBound: a fixed window with max_debt never settles
// more than L + D in a window, nor m·L + D over m consecutive windows.
func TestWindowDebtKeepsBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		if f := windowDebtModel(rt, windowFaultNone); f != "" {
			rt.Fatal(f)
		}
	})
}
