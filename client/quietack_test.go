package client_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// trickleEarlyShare: four clients hold the same 16 keys of a policy with
// r = B = 1000/s, each calling every key about twice a second (every
// 500 ms ± 100 ms), renewals every 400 ms. Once the leases have renewed
// ten times each (their shares settled) it counts 400 renewals' answers
// and returns how many asked for an early acknowledgement (renew after
// 50 ms) and how many were counted.
func trickleEarlyShare(t *testing.T) (early, all int64) {
	t.Helper()
	const clients, keys = 4, 16
	c := startCluster(t, "policies:\n  - {name: trickle, algorithm: token-bucket, rate: 1000, burst: 1000, key: [tenant], lease: {duration: 2s, renew_after: 400ms}}\n")
	var renewals, measured, acks atomic.Int64
	var measuring atomic.Bool
	lims := make([][]*client.Limiter, clients)
	for i := range lims {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("trickle-%d", i), NoRemote: true,
			OnGrant: func(g client.GrantInfo) {
				if !g.Renewal {
					return
				}
				renewals.Add(1)
				if measuring.Load() {
					measured.Add(1)
					if g.RenewAfter <= 50*time.Millisecond {
						acks.Add(1)
					}
				}
			}})
		for k := range keys {
			lims[i] = append(lims[i], cl.Limiter("trickle", client.Key{"tenant": fmt.Sprint("t", k)}))
		}
	}
	next := make([][]time.Time, clients)
	for i := range next {
		for range keys {
			next[i] = append(next[i], time.Now().Add(rand.N(500*time.Millisecond)))
		}
	}
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	deadline := time.Now().Add(testcluster.DefaultWait)
	for measured.Load() < 400 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals, %d measured in %v", renewals.Load(), measured.Load(), testcluster.DefaultWait)
		}
		<-pace.C
		now := time.Now()
		for i := range lims {
			for k, l := range lims[i] {
				if now.After(next[i][k]) {
					l.AllowN(1)
					next[i][k] = now.Add(400*time.Millisecond + rand.N(200*time.Millisecond))
				}
			}
		}
		if !measuring.Load() && renewals.Load() >= 10*clients*keys {
			measuring.Store(true)
		}
	}
	return acks.Load(), measured.Load()
}

// maxTrickleAckShare is the share of a trickle's renewals that may ask
// for an early acknowledgement: cuts worth one come only from shares
// still settling.
const maxTrickleAckShare = 0.10

// TestTrickleKeysRenewAtTheirInterval: keys whose holders each call a
// trickle (twice a second against r = 1000/s) renew at the policy's
// interval. Their measured demand wobbles at every renewal; each wobble
// was a cut that asked for a renewal 50 ms later (about half of all
// renewals, twice the renewals a steady key needs) until the quiet
// acknowledgement (fsm.FeatureQuietAck; docs/design.md §3.2, "Early
// renewal"). Its negative control (ack-any-cut,
// quietack_faults_test.go) must exceed what this test allows.
func TestTrickleKeysRenewAtTheirInterval(t *testing.T) {
	t.Parallel()
	early, all := trickleEarlyShare(t)
	share := float64(early) / float64(all)
	t.Logf("%d of %d renewals (%.1f%%) asked for an early acknowledgement", early, all, 100*share)
	if share > maxTrickleAckShare {
		t.Fatalf("%d of %d trickle renewals (%.1f%%) asked for an early acknowledgement, want at most %.0f%%", early, all, 100*share, 100*maxTrickleAckShare)
	}
}
