package httplimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/inflight"
)

// Cluster-wide concurrency (Config.Slots). After the layers admitted a
// request, it takes one of its key's slots through
// inflight.ClusterLimiter.RunKey, the code path every concurrency layer
// shares (its queue, its release on every exit, its fault controls), and
// the handler runs under the slot's context: that context ends when the
// request's does, and when the slot's rules end it (max_duration, or
// cancel_grace before the slot lease's deadline).
//
// Rate first, then concurrency: a request the rate refuses never waits
// for a slot nor holds one; a request the rate admitted and the slots
// then refuse has spent its tokens (the rate counts it as an attempt).

// slotted returns next behind key's slot of the Slots policy.
func (m *Middleware) slotted(route string, key client.Key, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		policy := m.cfg.Slots.Policy()
		m.metrics.queued(policy, 1)
		held := false
		err := m.cfg.Slots.RunKey(r.Context(), key, func(ctx context.Context) {
			m.metrics.queued(policy, -1)
			held = true
			m.metrics.count(policy, route, outAllowed)
			m.metrics.inFlight(policy, 1)
			defer m.metrics.inFlight(policy, -1)
			next.ServeHTTP(w, r.WithContext(ctx))
		})
		if !held {
			m.metrics.queued(policy, -1)
		}
		if err == nil {
			return
		}
		refusal := inflight.RefusalOf(err)
		switch {
		case refusal == inflight.Ended:
			m.metrics.count(policy, route, outCanceled)
			m.rejectSlotEnded(w, policy)
		case m.cfg.Shadow && refusal == inflight.Busy:
			m.metrics.count(policy, route, outShadowConcurrency)
			next.ServeHTTP(w, r)
		case m.cfg.Shadow:
			m.metrics.count(policy, route, outShadowUnavailable)
			next.ServeHTTP(w, r)
		case refusal == inflight.Busy:
			m.metrics.count(policy, route, outConcurrency)
			m.rejectSlots(w, policy)
		default:
			m.metrics.count(policy, route, outUnavailable)
			m.rejectUnavailable(w, client.Decision{})
		}
	})
}

// rejectSlots answers 429 for a cluster-wide concurrency refusal: the
// key's slots are all in use and its queue is full, or the wait ended.
func (m *Middleware) rejectSlots(w http.ResponseWriter, policy string) {
	ra := jittered(1)
	setRetryAfter(w.Header(), ra)
	writeProblem(w, http.StatusTooManyRequests, problem{Type: ProblemConcurrencyExceeded, Title: "Too many concurrent requests", Policy: policy,
		Detail: fmt.Sprintf("Policy %q already runs as many of these requests at once as it allows, across every server; retry after %d s.", policy, ra)})
}

// rejectSlotEnded answers a request whose context ended while it waited
// for a slot: its client has usually gone, or its deadline is at hand.
func (m *Middleware) rejectSlotEnded(w http.ResponseWriter, policy string) {
	ra := jittered(1)
	setRetryAfter(w.Header(), ra)
	writeProblem(w, http.StatusServiceUnavailable, problem{Type: ProblemConcurrencyExceeded, Title: "Request ended while waiting", Policy: policy,
		Detail: fmt.Sprintf("This request ended while it waited for a slot of policy %q; retry after %d s.", policy, ra)})
}
