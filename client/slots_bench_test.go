package client_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	localinflight "github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/internal/testcluster"
)

// benchSlotPolicy: a concurrency policy large enough that one replica's
// share covers every benchmark goroutine (the slot lease then holds all
// it needs, and a request never waits on the network).
const benchSlotPolicy = `
policies:
  - name: benchslots
    algorithm: concurrency
    limit: 100000
    max_duration: 2s
    key: [tenant]
`

// BenchmarkSlotsAcquireRelease: one request's slot taken and given back
// (Acquire, then its release function) on a replica whose slot lease
// holds enough slots: the path every request of a cluster-wide
// concurrency policy takes (no RPC on it). Beside it in the same run, the
// alternatives a replica has without the cluster: client/inflight's
// per-replica Limiter (no cluster-wide cap: N per replica) and a
// buffered-channel semaphore (the floor). Sequential and with
// GOMAXPROCS goroutines.
//
//	go test ./client -run '^$' -bench SlotsAcquireRelease -count 10 | benchstat -
func BenchmarkSlotsAcquireRelease(b *testing.B) {
	cl := startBenchClientWith(b, benchSlotPolicy, "bench-slots")
	s := cl.Slots("benchslots", map[string]string{"tenant": "acme"}, client.SlotOptions{MaxQueue: -1})
	b.Cleanup(func() { _ = s.Close() })
	// warm holds n slots at once until the lease grants them (the
	// demand grows with what is held), then gives them back: the
	// benchmark that follows never waits on a renewal, since each renewal
	// asks for the peak in use since the last one.
	warm := func(b *testing.B, n int) {
		var held []func()
		testcluster.WaitFor(b, 30*time.Second, func() error {
			for len(held) < n {
				_, rel, err := s.Acquire(context.Background())
				if err != nil {
					return fmt.Errorf("%d slots held locally, want %d: %v", len(held), n, err)
				}
				held = append(held, rel)
			}
			return nil
		})
		for _, rel := range held {
			rel()
		}
	}
	local := localinflight.New(localinflight.Config{Limit: 100000})
	sem := make(chan struct{}, 100000)
	ctx := context.Background()
	cases := []struct {
		name string
		op   func() error
	}{
		{"ration-cluster-slot", func() error {
			_, rel, err := s.Acquire(ctx)
			if err == nil {
				rel()
				return nil
			}
			limit, running, waiting := s.State()
			return fmt.Errorf("%w (slots here: limit %d, running %d, waiting %d)", err, limit, running, waiting)
		}},
		{"inflight-local", func() error {
			rel, err := local.Acquire(ctx, "acme")
			if err == nil {
				rel()
			}
			return err
		}},
		{"channel-semaphore", func() error {
			sem <- struct{}{}
			<-sem
			return nil
		}},
	}
	for _, k := range cases {
		b.Run(k.name, func(b *testing.B) {
			warm(b, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := k.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(k.name+"-parallel", func(b *testing.B) {
			warm(b, 2*runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := k.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
