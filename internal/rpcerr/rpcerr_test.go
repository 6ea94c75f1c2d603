package rpcerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A replicated record keeps only the kind; the code a retry gets from it
// must be the code the first answer had, for every sentinel (wrapped, as
// the FSM wraps them), and every kind has a code and a message.
func TestKindKeepsTheCode(t *testing.T) {
	for _, e := range table {
		err := fmt.Errorf("policy %q: %w", "p", e.err)
		if got, want := KindCode(Kind(err)), Code(err); got != want && !(want == codes.DeadlineExceeded || want == codes.Canceled) {
			t.Errorf("%v: kind %v gives code %v, the error's code is %v", e.err, Kind(err), got, want)
		}
	}
	for k := range api.ErrorKind_name {
		kind := api.ErrorKind(k)
		if kind == api.ErrorKind_ERROR_KIND_UNSPECIFIED {
			continue
		}
		if _, ok := kindCodes[kind]; !ok {
			t.Errorf("kind %v has no code", kind)
		}
		if _, ok := kindMessages[kind]; !ok {
			t.Errorf("kind %v has no message", kind)
		}
	}
	if Kind(fmt.Errorf("something else")) != api.ErrorKind_ERROR_KIND_UNKNOWN || Kind(nil) != api.ErrorKind_ERROR_KIND_UNSPECIFIED {
		t.Error("unknown and nil errors")
	}
}

// The refusal of an older incarnation carries its reason as an ErrorInfo
// detail that survives the wire, keeps ErrStale's code and text, and
// is told apart from a stale seq; a per-key error rebuilt from its kind
// alone (a retry answered from a record) carries the same reason.
func TestOlderIncarnationReason(t *testing.T) {
	err := fmt.Errorf("%w: client %q incarnation 1 is older than 2", ErrOlderIncarnation, "c")
	if !errors.Is(err, ErrStale) || Code(err) != codes.Aborted || Kind(err) != api.ErrorKind_ERROR_KIND_OLDER_INCARNATION {
		t.Fatalf("older incarnation: is stale %v, code %v, kind %v", errors.Is(err, ErrStale), Code(err), Kind(err))
	}
	st := status.Convert(Status(err))
	if st.Code() != codes.Aborted || st.Message() != `stale request: client "c" incarnation 1 is older than 2` {
		t.Errorf("status %v %q", st.Code(), st.Message())
	}
	b, merr := proto.Marshal(st.Proto())
	var p spb.Status
	if merr != nil || proto.Unmarshal(b, &p) != nil {
		t.Fatal(merr)
	}
	wire := status.FromProto(&p).Err()
	if !IsOlderIncarnation(wire) || !IsOlderIncarnation(err) || Reason(wire) != ReasonOlderIncarnation {
		t.Errorf("reason over the wire %q, in process %q", Reason(wire), Reason(err))
	}
	stale := Status(fmt.Errorf("%w: client %q seq 1 is older than 2", ErrStale, "c"))
	if IsOlderIncarnation(stale) || Reason(stale) != "STALE" {
		t.Errorf("stale seq: reason %q", Reason(stale))
	}
	k := api.ErrorKind_ERROR_KIND_OLDER_INCARNATION
	replayed := KeyStatus(&api.KeyError{Code: uint32(KindCode(k)), Message: KindMessage(k), Kind: k})
	if status.Code(replayed) != codes.Aborted || !IsOlderIncarnation(replayed) {
		t.Errorf("replayed: %v, reason %q", replayed, Reason(replayed))
	}
	if KeyStatus(nil) != nil || Reason(nil) != "" || Reason(errors.New("x")) != "" || Reason(status.Error(codes.Aborted, "older than")) != "" {
		t.Error("no reason expected")
	}
}
