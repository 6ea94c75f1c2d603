package grpclimit

import (
	"context"

	"google.golang.org/grpc"

	"github.com/ration-dev/ration/client/inflight"
)

// Cluster-wide concurrency (Config.Slots). After the layers admitted a
// call, it takes one of its key's slots through
// inflight.ClusterLimiter.RunKey, the code path every concurrency layer
// shares (its queue, its release on every exit, its fault controls), and
// the handler runs under the slot's context: it ends when the call's
// does, and when the slot's rules end it (max_duration, or cancel_grace
// before the slot lease's deadline). A stream holds its slot until its
// handler returns: the stream's end.
//
// Rate first, then concurrency: a call the rate refuses never waits for a
// slot nor holds one; a call the rate admitted and the slots then refuse
// has spent its tokens.

// slotted runs f holding a slot (f gets the slot's context), or runs it
// at once with ctx when there are no slots or the key function says so;
// the error is the refusal's status (f did not run), or nil.
func (g *Interceptor) slotted(ctx context.Context, fullMethod string, f func(context.Context)) error {
	if g.cfg.Slots == nil {
		f(ctx)
		return nil
	}
	key := map[string]string{}
	if g.cfg.SlotsKey != nil {
		if key = g.cfg.SlotsKey(ctx, fullMethod, g.cfg.Principal(ctx)); key == nil {
			f(ctx)
			return nil
		}
	}
	policy := g.cfg.Slots.Policy()
	queued := g.slotsQueued.WithLabelValues(policy)
	queued.Inc()
	held := false
	err := g.cfg.Slots.RunKey(ctx, key, func(slotCtx context.Context) {
		queued.Dec()
		held = true
		g.metrics.WithLabelValues(policy, g.cfg.MethodLabel(fullMethod), "allowed").Inc()
		inFlight := g.slotsInFlight.WithLabelValues(policy)
		inFlight.Inc()
		defer inFlight.Dec()
		f(slotCtx)
	})
	if !held {
		queued.Dec()
	}
	if err == nil {
		return nil
	}
	r := inflight.RefusalOf(err)
	g.metrics.WithLabelValues(policy, g.cfg.MethodLabel(fullMethod), slotOutcome(r)).Inc()
	return slotRefusal(r, err, policy)
}

func slotOutcome(r inflight.Refusal) string {
	switch r {
	case inflight.Busy:
		return "limited"
	case inflight.Ended:
		return "canceled"
	}
	return "unavailable"
}

// slotStream is a stream whose handler runs under its slot's context.
type slotStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *slotStream) Context() context.Context { return s.ctx }
