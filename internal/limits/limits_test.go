package limits_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
)

// CheckCaller refuses a caller with no client ID, one longer than
// ClientIDBytes or a seq of 0 (InvalidArgument, naming the field), and
// accepts the longest client ID.
func TestCheckCaller(t *testing.T) {
	for _, c := range []struct {
		name   string
		caller *api.Caller
		want   string // "" for accepted
	}{
		{"no caller", nil, "invalid argument: caller.client_id is required"},
		{"empty client ID", &api.Caller{Seq: 1}, "invalid argument: caller.client_id is required"},
		{"client ID too long", &api.Caller{ClientId: strings.Repeat("x", limits.ClientIDBytes+1), Seq: 1}, "invalid argument: caller.client_id is 257 bytes, more than 256"},
		{"seq 0", &api.Caller{ClientId: "c"}, "invalid argument: caller.seq must be at least 1"},
		{"longest client ID", &api.Caller{ClientId: strings.Repeat("x", limits.ClientIDBytes), Seq: 1}, ""},
		{"incarnation 0", &api.Caller{ClientId: "c", Seq: 1}, ""},
	} {
		err := limits.CheckCaller(c.caller)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		case c.want != "" && (!errors.Is(err, rpcerr.ErrInvalid) || rpcerr.Code(err) != codes.InvalidArgument):
			t.Errorf("%s: %v is not rpcerr.ErrInvalid (code %v)", c.name, err, rpcerr.Code(err))
		}
	}
}
