package coordinator

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// RaftLogBytes sums the payload bytes of the Raft log entries with indexes
// in (after, upTo] that are still in this server's log store. Benchmarks use
// it for "log bytes per renewal"; entries already compacted into a snapshot
// are not counted (n says how many were).
func (s *Server) RaftLogBytes(after, upTo uint64) (bytes int64, n int, err error) {
	first, err := s.store.FirstIndex()
	if err != nil {
		return 0, 0, err
	}
	if after+1 < first {
		return 0, 0, fmt.Errorf("entries from %d were compacted (first index %d)", after+1, first)
	}
	var l raft.Log
	for i := after + 1; i <= upTo; i++ {
		if err := s.store.GetLog(i, &l); err != nil {
			return bytes, n, fmt.Errorf("log %d: %w", i, err)
		}
		bytes += int64(len(l.Data))
		n++
	}
	return bytes, n, nil
}
