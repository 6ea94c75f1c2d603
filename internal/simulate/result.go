package simulate

import (
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Mode selects how policies combine.
type Mode string

// The modes.
const (
	// ModeCompare runs every policy on its own over the whole trace.
	ModeCompare Mode = "compare"
	// ModeChain requires every request to pass every policy in order.
	ModeChain Mode = "chain"
)

// ParseMode accepts "compare" and "chain".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeCompare, ModeChain:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mode %q is not a mode; want compare or chain", s)
}

// Counters are the four totals kept for every policy, group and chain.
type Counters struct {
	AcceptedRequests int64 `json:"accepted_requests"`
	AcceptedWork     int64 `json:"accepted_work"`
	RejectedRequests int64 `json:"rejected_requests"`
	RejectedWork     int64 `json:"rejected_work"`
}

// Requests is the number of requests counted.
func (c Counters) Requests() int64 { return c.AcceptedRequests + c.RejectedRequests }

// Work is the total cost counted.
func (c Counters) Work() int64 { return c.AcceptedWork + c.RejectedWork }

func (c *Counters) add(accepted bool, cost int64) {
	if accepted {
		c.AcceptedRequests++
		c.AcceptedWork += cost
	} else {
		c.RejectedRequests++
		c.RejectedWork += cost
	}
}

// Totals are counters with an optional per-group breakdown.
type Totals struct {
	Counters
	// Groups maps a group value (the Options.GroupBy columns' values joined
	// with "/") to its counters. Nil unless grouping was asked for.
	Groups map[string]*Counters `json:"groups,omitempty"`
}

// PolicyResult is one policy's outcome.
type PolicyResult struct {
	Name string `json:"name"`
	Totals
	// Windows: per-window figures of a leased window policy
	// (fixed-window, sliding-window-approx).
	Windows *WindowResult `json:"windows,omitempty"`
	// Concurrency: the figures of a concurrency policy.
	Concurrency *ConcurrencyResult `json:"concurrency,omitempty"`
	// Settled: the settled costs of rows with an estimate, in a trace with
	// an estimate column, for a policy charged by cost.
	Settled *SettledResult `json:"settled_costs,omitempty"`
}

// Result is the outcome of a replay. Its JSON form is
//
//	{"mode": ..., "policies": [{"name": ..., "accepted_requests": ..., ...,
//	  "groups": {...}}], "admitted": {...}}
//
// with groups only when grouping and admitted only in chain mode.
type Result struct {
	Mode Mode `json:"mode"`
	// Clock says what the trace's times are: the trace start (at_ms from
	// time 0), Options.Start plus at_ms, or an at / unix_ms column.
	Clock    string         `json:"clock"`
	Policies []PolicyResult `json:"policies"`
	// Admitted is the chain's verdict: a request is accepted iff every
	// policy accepted it. Nil in compare mode.
	Admitted *Totals `json:"admitted,omitempty"`

	// Requests is the number of requests in the trace.
	Requests int64 `json:"-"`
	// GroupBy lists the grouping columns, if any.
	GroupBy []string `json:"-"`
}

// WriteTable renders r as an aligned text table: one row per policy, its
// groups indented beneath in sorted order, and in chain mode an
// "admitted (chain)" row. The output depends only on r.
func WriteTable(w io.Writer, r *Result) error {
	var head strings.Builder
	fmt.Fprintf(&head, "mode: %s   requests: %d", r.Mode, r.Requests)
	if len(r.GroupBy) > 0 {
		fmt.Fprintf(&head, "   group-by: %s", strings.Join(r.GroupBy, "/"))
	}
	if r.Clock != "" {
		fmt.Fprintf(&head, "\nclock: %s", r.Clock)
	}
	if _, err := fmt.Fprintln(w, head.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tACCEPTED\tREJECTED\tACCEPT%\tWORK ACCEPTED\tWORK REJECTED\tWORK ACCEPT%")
	row := func(label string, c Counters) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\n", label,
			c.AcceptedRequests, c.RejectedRequests, Percent(c.AcceptedRequests, c.Requests()),
			c.AcceptedWork, c.RejectedWork, Percent(c.AcceptedWork, c.Work()))
	}
	block := func(label string, t *Totals) {
		row(label, t.Counters)
		keys := make([]string, 0, len(t.Groups))
		for k := range t.Groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g := k
			if g == "" {
				g = `""`
			}
			row("  "+g, *t.Groups[k])
		}
	}
	for i := range r.Policies {
		block(r.Policies[i].Name, &r.Policies[i].Totals)
	}
	if r.Admitted != nil {
		block("admitted (chain)", r.Admitted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeExtras(w, r)
}

// writeExtras renders the window and concurrency figures, if any policy
// has them.
func writeExtras(w io.Writer, r *Result) error {
	var wins, slots, settled bool
	for _, p := range r.Policies {
		wins = wins || p.Windows != nil
		slots = slots || p.Concurrency != nil
		settled = settled || p.Settled != nil
	}
	if wins {
		fmt.Fprintln(w, "\nwindows (as the cluster leases them):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "POLICY\tWINDOW\tLIMIT\tWINDOWS SEEN\tMAX ADMITTED\tIN WINDOW")
		for _, p := range r.Policies {
			if x := p.Windows; x != nil {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", p.Name, x.Window, x.Limit, x.Windows, x.MaxAdmitted, x.MaxAdmittedWindow)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if slots {
		fmt.Fprintln(w, "\nconcurrency:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "POLICY\tLIMIT\tMAX DURATION\tKEYS\tMAX IN FLIGHT\tUTILISATION\tCUT OFF\tQUEUED\tQUEUE WAIT")
		for _, p := range r.Policies {
			if x := p.Concurrency; x != nil {
				md := "-"
				if x.MaxDurationMs > 0 {
					md = strconv.FormatFloat(x.MaxDurationMs, 'f', -1, 64) + "ms"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%sms\n", p.Name, x.Limit, md, x.Keys, x.MaxInFlight,
					x.Utilisation, x.CutOff, x.Queued, strconv.FormatFloat(x.QueuedWaitMs, 'f', -1, 64))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if settled {
		return writeSettled(w, r)
	}
	return nil
}

// Percent is 100*part/whole with one decimal, rounded half up, computed in
// integers so it is the same on every platform: Percent(2, 3) = "66.7%".
// It returns "-" when whole is 0.
func Percent(part, whole int64) string {
	if whole <= 0 || part < 0 || part > whole {
		return "-"
	}
	// tenths = floor((part*2000 + whole) / (2*whole)), in 128 bits.
	hi, lo := bits.Mul64(uint64(part), 2000)
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(whole), 0)
	hi += carry
	tenths, _ := bits.Div64(hi, lo, 2*uint64(whole)) // part <= whole keeps hi small
	return strconv.FormatUint(tenths/10, 10) + "." + strconv.FormatUint(tenths%10, 10) + "%"
}
