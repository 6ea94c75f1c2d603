package coordinator

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tracing"
)

// maxInflightApplies bounds concurrent Raft applies of lease batches. While
// they are in flight, new requests queue and go out together in the next
// entry: under load, batches grow instead of entries multiplying.
const maxInflightApplies = 4

type batchReq struct {
	op   *api.LeaseOp
	size int // encoded bytes, for the entry's byte budget
	done chan fsm.OpResult
	// span is the call's span, linked from its entry's (tracing on only).
	span trace.SpanContext
}

// maxEntryBytes bounds one coalesced Raft entry (a single request is bounded
// by MaxRequestBytes): large entries stall replication and snapshots.
const maxEntryBytes = 8 << 20

type batcher struct {
	s   *Server
	in  chan *batchReq
	sem chan struct{}
	// tracer, if tracing is on, makes a span of each entry.
	tracer trace.Tracer
}

func newBatcher(s *Server) *batcher {
	return &batcher{s: s, in: make(chan *batchReq, 4096), sem: make(chan struct{}, maxInflightApplies), tracer: tracing.Tracer(s.cfg.TracerProvider)}
}

// submit queues one client RPC and waits for its committed result.
func (b *batcher) submit(ctx context.Context, op *api.LeaseOp) fsm.OpResult {
	req := &batchReq{op: op, size: proto.Size(op), done: make(chan fsm.OpResult, 1)}
	if b.tracer != nil {
		req.span = trace.SpanContextFromContext(ctx)
	}
	select {
	case b.in <- req:
	case <-ctx.Done():
		return fsm.OpResult{Err: ctx.Err()}
	case <-b.s.shutdownCh:
		return fsm.OpResult{Err: fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)}
	}
	select {
	case r := <-req.done:
		return r
	case <-ctx.Done():
		// The entry may still commit; a retry with the same seq gets the
		// recorded answer.
		return fsm.OpResult{Err: ctx.Err()}
	case <-b.s.shutdownCh:
		// Queued after run() drained: nobody will answer it.
		return fsm.OpResult{Err: fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)}
	}
}

func (b *batcher) run() {
	for {
		var first *batchReq
		select {
		case first = <-b.in:
		case <-b.s.shutdownCh:
			b.drain()
			return
		}
		select {
		case b.sem <- struct{}{}:
		case <-b.s.shutdownCh:
			first.done <- fsm.OpResult{Err: fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)}
			b.drain()
			return
		}
		batch, carry := collect(first, b.in, b.s.cfg.MaxBatchOps, maxEntryBytes)
		b.apply(batch)
		if carry != nil {
			// Over the byte budget: it starts the next entry.
			b.requeue(carry)
		}
	}
}

// collect takes first and whatever else is queued, up to maxOps requests
// and maxBytes encoded bytes. A request that would go over the byte budget
// is returned as carry, to start the next entry.
func collect(first *batchReq, in <-chan *batchReq, maxOps, maxBytes int) (batch []*batchReq, carry *batchReq) {
	batch = []*batchReq{first}
	bytes := first.size
	for len(batch) < maxOps {
		select {
		case r := <-in:
			if bytes+r.size > maxBytes {
				return batch, r
			}
			batch = append(batch, r)
			bytes += r.size
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// requeue puts a request back at the head of the next batch.
func (b *batcher) requeue(r *batchReq) {
	select {
	case b.sem <- struct{}{}:
		b.apply([]*batchReq{r})
	case <-b.s.shutdownCh:
		r.done <- fsm.OpResult{Err: fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)}
	}
}

func (b *batcher) drain() {
	for {
		select {
		case r := <-b.in:
			r.done <- fsm.OpResult{Err: fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)}
		default:
			return
		}
	}
}

// traceEntry starts the span of one Raft entry of lease operations,
// linked to the calls it carries (one entry serves many traces), and
// returns the function that ends it once the entry is applied.
func (b *batcher) traceEntry(batch []*batchReq) func(error) {
	if b.tracer == nil {
		return func(error) {}
	}
	links := make([]trace.Link, 0, len(batch))
	for _, r := range batch {
		if r.span.IsValid() {
			links = append(links, trace.Link{SpanContext: r.span})
		}
	}
	_, span := b.tracer.Start(context.Background(), "raft.apply lease-batch", trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("ration.ops", len(batch)), attribute.String("ration.server", b.s.cfg.ID)))
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (b *batcher) apply(batch []*batchReq) {
	cmd := &api.LeaseBatchCommand{Ops: make([]*api.LeaseOp, len(batch))}
	for i, r := range batch {
		cmd.Ops[i] = r.op
	}
	if faults.Active(faults.AckBeforeCommit) {
		b.applyBeforeCommit(batch, cmd)
		return
	}
	fail := func(err error) {
		for _, r := range batch {
			r.done <- fsm.OpResult{Err: err}
		}
		<-b.sem
	}
	start := time.Now()
	end := b.traceEntry(batch)
	f, err := b.s.proposeAsync(fsm.CmdLeaseBatch, cmd)
	if err != nil {
		end(err)
		fail(err)
		return
	}
	go func() {
		err := f.Error()
		end(err)
		if err != nil {
			fail(raftErr(err))
			return
		}
		bytes := 0
		for _, r := range batch {
			bytes += r.size
		}
		b.s.stats.observeBatch(len(batch), bytes, time.Since(start))
		res, _ := f.Response().(*fsm.Result)
		if res == nil || len(res.Ops) != len(batch) {
			fail(fmt.Errorf("%w: batch result does not match the batch", rpcerr.ErrUnavailable))
			return
		}
		for i, r := range batch {
			r.done <- res.Ops[i]
		}
		<-b.sem
	}()
}
