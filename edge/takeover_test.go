package edge

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The edge decides that another process owns its client ID by the kind of
// the cluster's refusal, never by its text: another refusal whose text
// says "older than" (a stale seq) is no takeover, and the refusal answered
// from the record of a retried request, whose message is derived from the
// kind alone, is one.
func TestTakenOverByKind(t *testing.T) {
	// The forms the FSM and the coordinator give (fsm checkCallerOnly).
	olderIncarnation := rpcerr.Status(fmt.Errorf("%w: client %q incarnation 1 is older than 2; a restarted process must use a larger incarnation", rpcerr.ErrOlderIncarnation, "e"))
	staleSeq := rpcerr.Status(fmt.Errorf("%w: client %q seq 1 is older than 2; use a seq greater than 2", rpcerr.ErrStale, "e"))
	// A per-key answer as a retry gets it from the record, which keeps only
	// the kind (fsm answerForm), as the client turns it into an error.
	kind := api.ErrorKind_ERROR_KIND_OLDER_INCARNATION
	replayed := rpcerr.KeyStatus(&api.KeyError{Code: uint32(rpcerr.KindCode(kind)), Message: rpcerr.KindMessage(kind), Kind: kind})
	staleGrant := api.ErrorKind_ERROR_KIND_STALE
	replayedStale := rpcerr.KeyStatus(&api.KeyError{Code: uint32(rpcerr.KindCode(staleGrant)), Message: rpcerr.KindMessage(staleGrant), Kind: staleGrant})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"older incarnation", olderIncarnation, true},
		{"older incarnation, answered from the record", replayed, true},
		{"stale seq, whose text says older than", staleSeq, false},
		{"stale grant, answered from the record", replayedStale, false},
		{"a bare Aborted saying older than", status.Error(codes.Aborted, "lease 3 is older than 4"), false},
		{"unavailable", status.Error(codes.Unavailable, "no leader"), false},
		{"none", nil, false},
	} {
		if status.Code(c.err) != codes.Aborted && c.want {
			t.Errorf("%s: code %v, want Aborted", c.name, status.Code(c.err))
		}
		if got := takenOver(c.err); got != c.want {
			t.Errorf("%s (%v): taken over %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
