package lease

import (
	"slices"
	"testing"
)

// AppendHolders lists each holder once, in order, whatever dst holds.
func TestAppendHolders(t *testing.T) {
	l, err := newLedger(LedgerConfig{RateMilliPerSec: 10_000, CapacityMilli: 10_000, StartFull: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.AppendHolders(nil); len(got) != 0 {
		t.Fatalf("an empty ledger has holders %v", got)
	}
	for i, h := range []struct {
		id  string
		inc uint64
	}{{"b", 1}, {"a", 1}, {"b", 2}, {"c", 1}} {
		if _, err := l.Grant(sec, GrantRequest{ClientID: h.id, Incarnation: h.inc, Seq: uint64(i + 1), TTLNanos: sec}); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.AppendHolders([]string{"c"}); !slices.Equal(got, []string{"c", "a", "b", "c"}) {
		t.Fatalf("holders %v, want [c a b c] (dst kept, then a, b once, c)", got)
	}
	if _, err := l.Expire(2 * sec); err != nil {
		t.Fatal(err)
	}
	if got := l.AppendHolders(nil); len(got) != 0 {
		t.Fatalf("holders %v after every lease expired", got)
	}
}
