package client

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"
)

// fuzzCosts are costs worth trying at every position: the edges of the
// range and the values whose milli-token product wraps.
var fuzzCosts = []int64{0, 1, -1, 5, 10, 11, MaxCost, MaxCost + 1, 18446744073709552, math.MaxInt64, math.MinInt64,
	math.MaxInt64 / 1000, math.MaxInt64/1000 + 1, -18446744073709552, 1 << 53}

// FuzzAdmission drives the admission entry points (AllowN, Allow,
// AllowAll, AllowAllDetail, WaitN) with arbitrary costs on two leases that
// do not refill, and checks after every call that nothing panics and that
// each bucket holds exactly its start minus what the calls reported
// admitted from it: no cost is admitted beyond what the bucket holds, and
// no refused cost is charged.
func FuzzAdmission(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 7, 2, 3, 8, 9, 1, 2, 6, 4, 0, 12, 5, 14})
	seed := make([]byte, 0, 64)
	for _, op := range []byte{0, 2, 3, 4} {
		seed = append(seed, op|0x80)
		seed = binary.LittleEndian.AppendUint64(seed, 18446744073709552)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := offlineClient(t)
		a, b := c.Limiter("p", Key{"k": "a"}), c.Limiter("q", Key{"k": "b"})
		capA, capB := int64(10), int64(3)
		if len(data) > 0 {
			capA = int64(data[0]%64) + 1
			data = data[1:]
		}
		grant(a, 1, 0, capA, false, "a")
		grant(b, 2, 0, capB, false, "b")
		admitted := map[*Limiter]int64{}
		expired, cancel := context.WithDeadline(context.Background(), time.Now())
		defer cancel()
		for len(data) > 0 {
			op := data[0]
			data = data[1:]
			var cost int64
			if op&0x80 != 0 && len(data) >= 8 {
				cost = int64(binary.LittleEndian.Uint64(data))
				data = data[8:]
			} else if len(data) > 0 {
				cost = fuzzCosts[int(data[0])%len(fuzzCosts)]
				data = data[1:]
			}
			costMilli := int64(0)
			if cost >= 0 && cost <= MaxCost {
				costMilli = cost * 1000
			}
			switch op & 0x7 {
			case 0, 5:
				if d := a.AllowN(cost); d.Allowed {
					admitted[a] += costMilli
				} else if cost < 0 && d.Reason != InvalidCost {
					t.Fatalf("AllowN(%d) = %+v, want InvalidCost", cost, d)
				}
			case 1:
				if a.Allow() {
					admitted[a] += 1000
				}
			case 2, 6:
				if d, i := c.AllowAllLayers(cost, a, b); d.Allowed != (i < 0) {
					t.Fatalf("AllowAllLayers(%d) = %+v, %d", cost, d, i)
				} else if i < 0 {
					admitted[a] += costMilli
					admitted[b] += costMilli
				}
			case 3:
				var decs [2]Decision
				if i := c.AllowAllDetail(cost, []*Limiter{b, a}, decs[:]); i < 0 {
					admitted[a] += costMilli
					admitted[b] += costMilli
				}
			case 4, 7:
				if err := a.WaitN(expired, cost); err == nil {
					admitted[a] += costMilli
				}
			}
			for l, start := range map[*Limiter]int64{a: capA * 1000, b: capB * 1000} {
				lvl := l.cur.Load().bucket.LevelMilli(c.clock.Precise())
				if lvl != start-admitted[l] || lvl < 0 {
					t.Fatalf("after op %d cost %d: level %d, start %d minus admitted %d = %d", op, cost, lvl, start, admitted[l], start-admitted[l])
				}
			}
		}
	})
}
