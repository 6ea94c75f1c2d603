package fsm

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// Snapshots against the number of keys (cow.go; bench/history/2026-12-03.md, "Cluster
// scale: 10^5 and 10^6 keys, snapshots without stall"). The states are
// scaleState's (one lease per key; 10^6 keys with
// RATION_BENCH_MAX_KEYS=1000000):
//
//	RATION_BENCH_MAX_KEYS=1000000 go test ./fsm -run '^$' -bench 'ScaleSnapshot|ScaleHeap|ScaleRenew' -benchtime 20x -count 3
//
//   - ScaleSnapshotCapture: Snapshot(), all of it under the FSM lock (the
//     time apply and queries wait), then Release;
//   - ScaleSnapshotExportOld: the old path's work under the lock (the deep
//     copy of export_ref_test.go), the before figure of the same run;
//   - ScaleSnapshotPersist: capture and Persist (the encoding, outside the
//     lock), with the snapshot's size;
//   - ScaleRenewWhileCaptured: a renewal of a key not yet changed since a
//     capture that is still being persisted (it clones the key's ledger),
//     against ScaleRenew;
//   - ScaleHeap: heap bytes per lease with one lease per key and with four.

// discardSink is a raft.SnapshotSink that counts bytes.
type discardSink struct{ n int64 }

func (d *discardSink) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discardSink) Close() error                { return nil }
func (d *discardSink) ID() string                  { return "discard" }
func (d *discardSink) Cancel() error               { return nil }

var _ io.Writer = (*discardSink)(nil)

func BenchmarkScaleSnapshotCapture(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s, err := fx.h.f.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Release()
				b.StartTimer()
			}
		})
	}
}

func BenchmarkScaleSnapshotExportOld(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				fx.h.f.mu.RLock()
				d := fx.h.f.st.export()
				fx.h.f.mu.RUnlock()
				if len(d.ledgers) != n {
					b.Fatalf("%d ledgers", len(d.ledgers))
				}
			}
		})
	}
}

func BenchmarkScaleSnapshotPersist(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			var size int64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s, err := fx.h.f.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				sink := &discardSink{}
				if err := s.Persist(sink); err != nil {
					b.Fatal(err)
				}
				s.Release()
				size = sink.n
			}
			b.ReportMetric(float64(size), "snapshot-B")
			b.ReportMetric(float64(size)/float64(n), "snapshot-B/key")
		})
	}
}

// BenchmarkScaleRenewWhileCaptured: as ScaleRenew, with a capture live
// (not yet persisted): each renewal of a key not changed since is the
// key's first change, which clones its ledger. A new capture every
// len(keys) renewals keeps every renewal a first one.
func BenchmarkScaleRenewWhileCaptured(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			s, err := fx.h.f.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			clones := fx.h.f.st.cow.clones
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := i % len(fx.bulkIDs)
				if k == 0 && i > 0 {
					b.StopTimer()
					s.Release()
					if s, err = fx.h.f.Snapshot(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				fx.at += 1000
				fx.seq++
				ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{
					Caller: caller("bulk", 1, fx.seq),
					Keys:   []*api.RenewKey{{Key: scaleKey(strconv.Itoa(k)), LeaseId: fx.bulkIDs[k], Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
				}}})
				if ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
					b.Fatalf("renew: %v %v", ops[0].Err, ops[0].Lease)
				}
			}
			b.StopTimer()
			if got := fx.h.f.st.cow.clones - clones; got < b.N {
				b.Fatalf("%d clones for %d first renewals", got, b.N)
			}
			s.Release()
		})
	}
}

// BenchmarkScaleHeap: the live heap per lease of states of n keys with
// one lease each (scaleState's) and with four holders per key.
func BenchmarkScaleHeap(b *testing.B) {
	for _, n := range scaleSizes() {
		for _, holders := range []int{1, 4} {
			b.Run(fmt.Sprintf("keys=%d/holders=%d", n, holders), func(b *testing.B) {
				var perLease float64
				key := [2]int{n, holders}
				switch {
				case holders == 1:
					perLease = scaleState(b, n).heapPerKey
				case multiHeap[key] != 0:
					perLease = multiHeap[key]
				default:
					perLease = multiHolderHeap(b, n, holders)
					multiHeap[key] = perLease
				}
				for range b.N {
				}
				b.ReportMetric(perLease, "heapB/lease")
			})
		}
	}
}

var multiHeap = map[[2]int]float64{}

// multiHolderHeap builds (and drops) a state of n keys each leased by
// holders clients, and returns its live heap per lease.
func multiHolderHeap(b *testing.B, n, holders int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := &harness{t: b, f: New(nil)}
	h.enableFeatures(KnownFeatures)
	file, err := policy.Parse(strings.NewReader(scalePolicy))
	if err != nil {
		b.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, 1, cmd); r.Err != nil {
		b.Fatal(r.Err)
	}
	for c := range holders {
		var seq uint64
		for start := 0; start < n; start += MaxKeysPerOp {
			seq++
			req := &api.AcquireRequest{Caller: caller("holder-"+strconv.Itoa(c), 1, seq)}
			for i := start; i < min(n, start+MaxKeysPerOp); i++ {
				req.Keys = append(req.Keys, &api.AcquireKey{Key: scaleKey(strconv.Itoa(i)), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
			}
			ops := h.batch(int64(sec), &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}})
			for _, kl := range ops[0].Lease.GetLeases() {
				if kl.GetError() != nil {
					b.Fatalf("setup: %v", kl.GetError())
				}
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if _, keys, leases, _ := h.f.Counts(); keys != n || leases != n*holders {
		b.Fatalf("setup: %d keys and %d leases", keys, leases)
	}
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n*holders)
}

// BenchmarkScaleApplyDuringSnapshot: 1024-key renewal requests applied
// back to back while a snapshot of the state is taken and persisted on
// another goroutine (to memory): with the old path (the export under the
// read lock, export_ref_test.go, then its encoding), with the capture
// (Snapshot and Persist), and with none. Reports the requests' p99 and
// largest apply latency: what a snapshot stalls the state machine, without
// the cluster's network, disk and other servers. Run with -benchtime 1x
// (it runs until the snapshot is done, at least 40 requests).
func BenchmarkScaleApplyDuringSnapshot(b *testing.B) {
	for _, n := range scaleSizes() {
		if n < MaxKeysPerOp*2 {
			continue
		}
		for _, mode := range []string{"none", "old", "capture"} {
			b.Run(fmt.Sprintf("keys=%d/snapshot=%s", n, mode), func(b *testing.B) {
				fx := scaleState(b, n)
				f := fx.h.f
				done := make(chan error, 1)
				switch mode {
				case "none":
					close(done)
				case "old":
					go func() {
						f.mu.RLock()
						d := f.st.export()
						f.mu.RUnlock()
						done <- writeSnapshot(&discardSink{}, d)
					}()
				case "capture":
					go func() {
						s, err := f.Snapshot()
						if err == nil {
							err = s.Persist(&discardSink{})
							s.Release()
						}
						done <- err
					}()
				}
				var lat []time.Duration
				finished := false
				for i := 0; !finished || len(lat) < 40; i++ {
					fx.at += 1000
					fx.seq++
					req := &api.RenewRequest{Caller: caller("bulk", 1, fx.seq)}
					from := (i * MaxKeysPerOp) % (len(fx.bulkIDs) - MaxKeysPerOp)
					for k := from; k < from+MaxKeysPerOp; k++ {
						req.Keys = append(req.Keys, &api.RenewKey{Key: scaleKey(strconv.Itoa(k)), LeaseId: fx.bulkIDs[k], Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
					}
					t0 := time.Now() // the benchmark times the apply; apply itself reads no clock
					ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: req}})
					lat = append(lat, time.Since(t0))
					if ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
						b.Fatalf("renew: %v %v", ops[0].Err, ops[0].Lease)
					}
					if !finished {
						select {
						case err := <-done:
							if err != nil {
								b.Fatal(err)
							}
							finished = true
						default:
						}
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
				b.ReportMetric(float64(len(lat)), "requests")
			})
		}
	}
}
