package main

import (
	"bufio"
	"fmt"
	"time"

	"github.com/ration-dev/ration/api"
)

// writeWindowCounts lists the leased window keys of a listing: each key's
// current window (UTC), the units granted in it and its limit, and how
// many chunks are live. Nothing when there are none.
func writeWindowCounts(bw *bufio.Writer, r *api.ListLeasesResponse) {
	found := false
	for _, k := range r.GetKeys() {
		found = found || k.GetWindowLimitMilli() > 0
	}
	if !found {
		return
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Window counts (units granted in the current window; chunks are the leases above):")
	tw := newTable(bw)
	fmt.Fprintln(tw, "POLICY\tKEY\tWINDOW START (UTC)\tWINDOW END (UTC)\tGRANTED\tLIMIT\tCHUNKS")
	for _, k := range r.GetKeys() {
		if k.GetWindowLimitMilli() <= 0 {
			continue
		}
		n := 0
		for _, l := range r.GetLeases() {
			if l.GetPolicy() == k.GetPolicy() && l.GetKey() == k.GetKey() {
				n++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", k.GetPolicy(), orDash(k.GetKey()),
			time.Unix(0, k.GetWindowStartUnixNanos()).UTC().Format(time.RFC3339Nano),
			time.Unix(0, k.GetWindowEndUnixNanos()).UTC().Format(time.RFC3339Nano),
			milli(k.GetWindowCountMilli()), milli(k.GetWindowLimitMilli()), n)
	}
	tw.Flush()
}
