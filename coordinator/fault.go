package coordinator

import (
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// applyBeforeCommit is the negative control faults.AckBeforeCommit, which
// exists only in binaries built with -tags ration_faults: it applies the
// batch to this leader's own state machine, answers from that, and only
// then proposes it to Raft without waiting. The later commit is answered
// from the idempotency records on this server; if the entry never commits
// (this leader is cut off or killed), its grants exist nowhere else, and a
// new leader grants the same budget again. The jepsen-like tests must
// catch it.
func (b *batcher) applyBeforeCommit(batch []*batchReq, cmd *api.LeaseBatchCommand) {
	defer func() { <-b.sem }()
	res, err := b.s.speculate(cmd)
	if err == nil && (res == nil || len(res.Ops) != len(batch)) {
		err = fmt.Errorf("%w: batch result does not match the batch", rpcerr.ErrUnavailable)
	}
	for i, r := range batch {
		if err != nil {
			r.done <- fsm.OpResult{Err: err}
			continue
		}
		r.done <- res.Ops[i]
	}
}

func (s *Server) speculate(cmd *api.LeaseBatchCommand) (*fsm.Result, error) {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	if !s.clock.readyLocked(s.raft.CurrentTerm()) || !s.fsm.BaselineOn() {
		return nil, errTakingOver
	}
	data, err := fsm.Encode(fsm.CmdLeaseBatch, s.clock.nowLocked(), cmd)
	if err != nil {
		return nil, err
	}
	res, _ := s.fsm.Apply(&raft.Log{Type: raft.LogCommand, Data: data}).(*fsm.Result)
	_ = s.raft.Apply(data, s.cfg.ApplyTimeout) // not waited for: that is the fault
	return res, nil
}
