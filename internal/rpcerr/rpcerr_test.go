package rpcerr

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
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
