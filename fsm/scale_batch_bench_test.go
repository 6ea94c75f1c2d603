package fsm

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/ration-dev/ration/api"
)

// BenchmarkScaleRenewBatch: client bulk renews MaxKeysPerOp of its leases
// in one request (as clusterbench's clients do), a different run of keys
// each time; ns/op is per request. Uses only what the state machine had
// before copy-on-write snapshots (cow.go), so it runs on an older checkout
// too.
func BenchmarkScaleRenewBatch(b *testing.B) {
	for _, n := range scaleSizes() {
		if n < MaxKeysPerOp*2 {
			continue
		}
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				fx.at += 1000
				fx.seq++
				req := &api.RenewRequest{Caller: caller("bulk", 1, fx.seq)}
				from := (i * MaxKeysPerOp) % (len(fx.bulkIDs) - MaxKeysPerOp)
				for k := from; k < from+MaxKeysPerOp; k++ {
					req.Keys = append(req.Keys, &api.RenewKey{Key: scaleKey(strconv.Itoa(k)), LeaseId: fx.bulkIDs[k], Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
				}
				ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: req}})
				if ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
					b.Fatalf("renew: %v %v", ops[0].Err, ops[0].Lease)
				}
			}
		})
	}
}
