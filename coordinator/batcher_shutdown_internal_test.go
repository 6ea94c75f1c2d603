package coordinator

// Regression test from the adversarial review: a request queued after the
// batcher drained must not hang.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
)

// Finding 5: submit's second select does not watch shutdownCh. A request
// that wins the race into b.in after run() has drained and returned waits
// for a result nobody will send: until the caller's deadline (forever for
// a client without one), and GracefulStop waits for it.
func TestReviewSubmitAfterShutdown(t *testing.T) {
	s := &Server{cfg: Config{MaxBatchOps: 8}, shutdownCh: make(chan struct{})}
	b := newBatcher(s)
	close(s.shutdownCh)
	b.run() // drains and returns at once
	for i := range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		r := b.submit(ctx, &api.LeaseOp{})
		cancel()
		if errors.Is(r.Err, context.DeadlineExceeded) {
			t.Fatalf("attempt %d: submit on a shut-down server hung until the caller's deadline", i)
		}
	}
}
