package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// A snapshot restore mid-traffic (docs/design.md §3.5): restoring a
// snapshot saved while a budget was full, after clients spent it, must not
// hand the burst out again, and leases the restored state does not know
// (granted after the snapshot) are still in use by their holders. r = 1/s
// makes minting negligible: a refill shows as a second burst.
const restorePolicy = `
policies:
  - name: restored
    algorithm: token-bucket
    rate: 1
    burst: 50
    key: [tenant]
    lease: {duration: 3s, renew_after: 500ms}
`

var restoreBound = quotacheck.Bound{CapacityMilli: 50_000, RateMilliPerSec: 1_000}

func saveSnapshot(t *testing.T, c *testcluster.Cluster) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := leaderAdmin(t, c).SnapshotSave(ctx, &api.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			return b.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(ch.GetData())
	}
}

// restoreSnapshot restores snap at the leader as an operator would:
// retrying while the answer is Unavailable (a leader that stepped down
// mid-restore on a loaded machine; the retry restores, and holds every
// budget, again).
func restoreSnapshot(t *testing.T, c *testcluster.Cluster, snap []byte) error {
	t.Helper()
	_, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.SnapshotRestoreResponse, error) {
		stream, err := leaderAdmin(t, c).SnapshotRestore(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&api.SnapshotChunk{Data: snap}); err != nil {
			return nil, err
		}
		return stream.CloseAndRecv()
	})
	return err
}

func TestRestoreMidTrafficKeepsTheBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster for several seconds")
	}
	c := startCluster(t, restorePolicy)
	// Saved before anyone used the key: its budget restores full.
	snap := saveSnapshot(t, c)
	h := newHistory()
	first := newClient(t, client.Config{Servers: servers(c), ClientID: "first"})
	fl := first.Limiter("restored", client.Key{"tenant": "acme"})
	waitLease(t, h, fl)
	for h.decide("first", 1, fl.AllowN).Allowed {
	}
	if got := len(h.snapshot()); got < 45 {
		t.Fatalf("the first client admitted %d of the burst of 50", got)
	}
	if err := restoreSnapshot(t, c, snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	restoredAt := h.since()
	// Both clients offer load after the restore, the first one on the
	// lease the restored state never heard of.
	second := newClient(t, client.Config{Servers: servers(c), ClientID: "second"})
	sl := second.Limiter("restored", client.Key{"tenant": "acme"})
	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	for who, lim := range map[string]*client.Limiter{"first": fl, "second": sl} {
		go func() {
			load(h, who, lim, 10*time.Millisecond, time.Hour, stop)
			done <- struct{}{}
		}()
	}
	// Until the cluster grants again (after the restore's hold) and a
	// few tokens have been admitted since.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		n := 0
		for _, a := range h.snapshot() {
			if a.AtNanos > restoredAt.Nanoseconds() {
				n++
			}
		}
		if n < 3 {
			return fmt.Errorf("%d admitted since the restore", n)
		}
		return nil
	})
	close(stop)
	<-done
	<-done
	checkBoundSpans(t, "across the restore", h.spanSnapshot(), restoreBound)
}
