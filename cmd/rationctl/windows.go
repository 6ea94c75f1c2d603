package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// maxOperatorStep mirrors fsm.MaxWindowClockOperatorStepNanos (rationctl
// imports only the API): larger --max-step values are refused here, as
// the server refuses them.
const maxOperatorStep = 366 * 24 * time.Hour

// windowsVerbs: window time (docs/design.md §8.2, docs/operations.md).
var windowsVerbs = []verb{{
	name:    "windows status",
	summary: "show window time against the leader's wall clock, and a slew in progress",
	help: `Shows window time (the calendar clock of fixed-window and
sliding-window-approx policies: cluster time plus a replicated offset), the
leader's wall clock, how far window time lags it (negative: ahead), what a
slew in progress has still to take back, and what a re-sync would do now:
"step" (window time behind: moved forward), "slew" (ahead: run at 99% until
the excess is taken back; window time never goes back) or "none". The
leader does either by itself within 1 h; a larger lag needs
'rationctl windows resync --max-step'.

Asks the leader (admin:write: it is a dry run of windows resync).

--json prints {"leader", "leader_wall_unix_nanos", "window_unix_nanos",
"lag_nanos", "slew_left_nanos", "action", "amount_nanos", "applied",
"index", "refused" (why the action is beyond the bound, if it is)}.`,
	reads: true,
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().WindowResync(ctx, &api.WindowResyncRequest{DryRun: true})
		if err != nil {
			return err
		}
		return writeWindowClock(o, r)
	},
}, {
	name:     "windows resync",
	synopsis: "[--max-step D] [--dry-run]",
	summary:  "re-sync window time to the leader's wall clock, stepping further than the leader does by itself",
	help: `Re-syncs window time to the leader's wall clock now. Window time behind it
moves forward by the lag (the windows it skips count every chunk still
live in them, docs/design.md §8.2), by at most --max-step (default 1 h,
the bound a leader applies by itself; at most 366 days); window time
ahead of it is slewed (run at 99% of cluster time until the excess is
taken back, 100 times the excess: a day for 14 minutes), likewise at most
--max-step. A lag or excess above it is refused (FailedPrecondition) and
nothing changes.

Use it after a whole-cluster outage longer than an hour (cluster time
stops while no leader runs, so window time then lags the calendar), once
the leader's wall clock is checked: a wrong wall clock would skip windows.
--dry-run only reports what would be done. The server logs the re-sync as an
admin action (warning level, with the step and the lag before).`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.DurationVar(&o.maxStep, "max-step", 0, "the largest forward step `D` allowed (0: the leader's own bound, 1h; at most 8784h)")
		fs.BoolVar(&o.dryRun, "dry-run", false, "report the lag and what would be done; change nothing")
	},
	check: func(o *invocation) error {
		if o.maxStep < 0 || o.maxStep > maxOperatorStep {
			return fmt.Errorf("--max-step %v is outside [0, %v]", o.maxStep, maxOperatorStep)
		}
		return nil
	},
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().WindowResync(ctx, &api.WindowResyncRequest{MaxStepNanos: int64(o.maxStep), DryRun: o.dryRun})
		if err != nil {
			if st, ok := status.FromError(err); ok {
				return rpcerr.Error(st.Code(), maxStepFlag(st.Message()))
			}
			return err
		}
		r.Refused = maxStepFlag(r.GetRefused())
		return writeWindowClock(o, r)
	},
}}

// maxStepFlag names the request's max_step_nanos, in a server's refusal,
// by the flag that sets it.
func maxStepFlag(msg string) string { return strings.ReplaceAll(msg, "max_step_nanos", "--max-step") }

type windowClockStatusJSON struct {
	Leader              string `json:"leader"`
	LeaderWallUnixNanos int64  `json:"leader_wall_unix_nanos"`
	WindowUnixNanos     int64  `json:"window_unix_nanos"`
	LagNanos            int64  `json:"lag_nanos"`
	SlewLeftNanos       int64  `json:"slew_left_nanos"`
	Action              string `json:"action"`
	AmountNanos         int64  `json:"amount_nanos"`
	Applied             bool   `json:"applied"`
	Index               uint64 `json:"index"`
	Refused             string `json:"refused,omitempty"`
}

func writeWindowClock(o *invocation, r *api.WindowResyncResponse) error {
	if o.json {
		return writeJSON(o.stdout, windowClockStatusJSON{Leader: r.GetLeader(), LeaderWallUnixNanos: r.GetLeaderWallUnixNanos(),
			WindowUnixNanos: r.GetWindowUnixNanos(), LagNanos: r.GetLagNanos(), SlewLeftNanos: r.GetSlewLeftNanos(),
			Action: r.GetAction(), AmountNanos: r.GetAmountNanos(), Applied: r.GetApplied(), Index: r.GetIndex(), Refused: r.GetRefused()})
	}
	tw := newTable(o.stdout)
	fmt.Fprintf(tw, "Leader:\t%s\n", r.GetLeader())
	fmt.Fprintf(tw, "Leader's wall clock:\t%s\n", time.Unix(0, r.GetLeaderWallUnixNanos()).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "Window time:\t%s\n", time.Unix(0, r.GetWindowUnixNanos()).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "Lag:\t%s\n", windowLag(r.GetLagNanos(), r.GetSlewLeftNanos()))
	what := map[string]string{"step": "step forward by", "slew": "slew back by", "none": "nothing to do"}[r.GetAction()]
	switch {
	case r.GetAction() == "none":
		fmt.Fprintf(tw, "Re-sync:\t%s\n", what)
	case r.GetApplied():
		fmt.Fprintf(tw, "Re-sync:\t%s %v (applied at index %d)\n", what, time.Duration(r.GetAmountNanos()), r.GetIndex())
	case r.GetRefused() != "":
		fmt.Fprintf(tw, "Re-sync:\twould %s %v, beyond the bound allowed (not applied): %s\n", what, time.Duration(r.GetAmountNanos()), r.GetRefused())
	default:
		fmt.Fprintf(tw, "Re-sync:\twould %s %v (not applied)\n", what, time.Duration(r.GetAmountNanos()))
	}
	return errors.Join(tw.Flush())
}

// windowLag says how window time stands against a wall clock.
func windowLag(lag, slewLeft int64) string {
	var s string
	switch {
	case lag >= 0:
		s = fmt.Sprintf("%v behind the wall clock", time.Duration(lag))
	default:
		s = fmt.Sprintf("%v ahead of the wall clock", time.Duration(-lag))
	}
	if slewLeft > 0 {
		s += fmt.Sprintf(", slewing (%v left to take back)", time.Duration(slewLeft))
	}
	return s
}
