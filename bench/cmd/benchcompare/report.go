package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// writeMarkdown prints every section's table, the ratios of the same run,
// and the goals, met or missed.
func writeMarkdown(w io.Writer, r *results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Run\n\n%s, %d CPUs (%s), %s, load average %s before and %s after; %.0fs in all.\n\n",
		r.Date, r.Machine.CPUs, r.Machine.Model, r.Machine.Go, r.Machine.LoadAvg, r.Machine.LoadAft, r.ElapsedS)
	p("Versions: ")
	var vs []string
	for _, k := range []string{"github.com/gubernator-io/gubernator/v2", "github.com/go-redis/redis_rate/v10", "github.com/redis/go-redis/v9", "golang.org/x/time", "redis-server"} {
		if v, ok := r.Versions[k]; ok {
			vs = append(vs, fmt.Sprintf("%s %s", k, v))
		}
	}
	p("%s.\n\n", strings.Join(vs, "; "))

	if len(r.Decision) > 0 {
		p("## 1. Decision cost\n\n")
		p("| system | callers | decisions/s | decisions per CPU-second | p50 | p99 | p99.9 | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, d := range r.Decision {
			p("| %s | %d | %s | %s | %s | %s | %s | %d |\n", d.System, d.Callers, si(d.DecisionsPerSec), si(d.DecisionsPerCPUs),
				dur(d.P50Nanos), dur(d.P99Nanos), dur(d.P999Nanos), d.Errors)
		}
		p("\nRatios, same run (other system ÷ ration; higher favours ration):\n\n")
		p("| callers | vs | p99 ratio | p99.9 ratio | decisions per CPU-second ratio (ration ÷ other) |\n|---:|---|---:|---:|---:|\n")
		for _, c := range callersOf(r.Decision) {
			ra := find(r.Decision, sysRation, c)
			for _, other := range []string{sysRedis, sysGuberLocal, sysGuberGlobal, sysXRate} {
				o := find(r.Decision, other, c)
				if ra == nil || o == nil {
					continue
				}
				p("| %d | %s | %.0f× | %.0f× | %.0f× |\n", c, other, o.P99Nanos/ra.P99Nanos, o.P999Nanos/ra.P999Nanos, ra.DecisionsPerCPUs/o.DecisionsPerCPUs)
			}
		}
		p("\n")
	}
	if a := r.Accuracy; a != nil {
		p("## 2. Global accuracy\n\nr = %d/s, B = %d, T = %v, %s.\n\n", a.RatePerSec, a.Burst, time.Duration(a.DurationNanos), a.Offered)
		p("| system | admitted | utilization | most in 100ms (B+r·W = %d) | most in 1s (%d) | most in 10s (%d) | B + r·W held in every window | re-converged after the shift |\n|---|---:|---:|---:|---:|---:|---|---|\n",
			a.Rows[0].Windows[0].Bound, a.Rows[0].Windows[1].Bound, a.Rows[0].Windows[2].Bound)
		for _, x := range a.Rows {
			held := "yes"
			if !x.BoundHeld {
				held = fmt.Sprintf("no (worst excess %d tokens)", x.WorstExcess)
				if x.WorstExcess == 0 {
					// Under one token: client-side timestamps of an exact
					// server-side limiter, shifted by each reply's latency.
					held = "no, by under 1 token (timestamps taken at the client)"
				}
			}
			conv := "no (not within the run)"
			if x.Converged {
				conv = fmt.Sprintf("%.2fs", float64(x.ConvergenceNanos)/1e9)
			}
			p("| %s | %d | %.1f%% | %d (%.2f×) | %d (%.2f×) | %d (%.2f×) | %s | %s |\n", x.System, x.Admitted, 100*x.Utilization,
				x.Windows[0].MostMilli, x.Windows[0].Ratio, x.Windows[1].MostMilli, x.Windows[1].Ratio, x.Windows[2].MostMilli, x.Windows[2].Ratio, held, conv)
		}
		p("\n")
	}
	if c := r.Coord; c != nil {
		p("## 3. Coordinator cost\n\nEach key leased by two clients; every client renews all its keys once per %v window.\n\n", time.Duration(c.WindowNanos))
		p("| clients | keys | leases | key-acquires/s | key-renewals/s | renew RPC p99 | grant p50 | grant p99 | server CPU (cores) | RSS per server (MiB) | Raft entries/s | snapshot |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
		for _, x := range c.Rows {
			snap := "-"
			if x.SnapshotBytes > 0 {
				snap = fmt.Sprintf("%.1f MB", float64(x.SnapshotBytes)/1e6)
			}
			p("| %d | %d | %d | %s | %s | %s | %s | %s | %.2f | %v | %.0f | %s |\n", x.Clients, x.Keys, x.Leases, si(x.AcquirePerSec), si(x.RenewalsPerSec),
				dur(x.RenewP99Nanos), dur(x.GrantP50Nanos), dur(x.GrantP99Nanos), x.CPUCoresWindow, mib(x.RSSBytes), x.RaftEntriesPerSec, snap)
		}
		if c.RaftEntriesRead > 0 {
			p("\nRaft log at 10^5 keys: %.0f bytes per entry (%d entries read back), so %.2f MB/s of log.\n", c.RaftBytesPerEntry, c.RaftEntriesRead, c.RaftBytesPerSec/1e6)
		}
		if c.RaftNote != "" {
			p("\nRaft log: %s.\n", c.RaftNote)
		}
		p("\n")
	}
	if len(r.Failure) > 0 {
		p("## 4. Failure cost\n\n%d callers offer %d decisions/s on a key with ample quota.\n\n", failCallers, failRatePerS)
		p("| system | fault (at %v) | allowed | failed | worst second (allowed) | p99 all | p99 in the fault's second |\n|---|---|---:|---:|---:|---:|---:|\n", time.Duration(r.Failure[0].FaultAtNanos))
		for _, f := range r.Failure {
			p("| %s | %s | %d | %d | %d | %s | %s |\n", f.System, f.Fault, f.Allowed, f.Failed, f.WorstSecond, dur(f.P99Nanos), dur(f.P99FaultNanos))
		}
		p("\n")
	}
	writeEdgeMarkdown(p, r.Edge)
	writeLLMMarkdown(p, r.LLM)
	if r.Burst != nil {
		writeBurstMarkdown(p, r.Burst)
	}
	writeGoals(w, r)
}

func writeGoals(w io.Writer, r *results) {
	fmt.Fprintf(w, "## Goals\n\n")
	if len(r.Decision) > 0 {
		worstP99, worstCPU := math.Inf(1), math.Inf(1)
		for _, c := range callersOf(r.Decision) {
			ra := find(r.Decision, sysRation, c)
			for _, other := range []string{sysRedis, sysGuberLocal, sysGuberGlobal} {
				if o := find(r.Decision, other, c); ra != nil && o != nil {
					worstP99 = min(worstP99, o.P99Nanos/ra.P99Nanos)
					worstCPU = min(worstCPU, ra.DecisionsPerCPUs/o.DecisionsPerCPUs)
				}
			}
		}
		fmt.Fprintf(w, "- p99 at least 100× lower than Redis GCRA and Gubernator at every concurrency: %s (smallest ratio %.0f×)\n", verdict(worstP99 >= 100), worstP99)
		fmt.Fprintf(w, "- throughput per core at least 50× higher: %s (smallest ratio of decisions per CPU-second %.0f×)\n", verdict(worstCPU >= 50), worstCPU)
	}
	if a := r.Accuracy; a != nil {
		for _, x := range a.Rows {
			if x.System == sysRation {
				fmt.Fprintf(w, "- ration never over B + r·W: %s; at 95%% utilization or better: %s (%.1f%%)\n", verdict(x.BoundHeld), verdict(x.Utilization >= 0.95), 100*x.Utilization)
			}
		}
	}
	fmt.Fprintln(w)
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

func callersOf(rows []decisionRow) []int {
	var out []int
	seen := map[int]bool{}
	for _, d := range rows {
		if !seen[d.Callers] {
			seen[d.Callers] = true
			out = append(out, d.Callers)
		}
	}
	return out
}

func find(rows []decisionRow, system string, callers int) *decisionRow {
	for i := range rows {
		if rows[i].System == system && rows[i].Callers == callers {
			return &rows[i]
		}
	}
	return nil
}

// si formats a count compactly: 1234567 -> "1.23M".
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// dur formats nanoseconds: 52 -> "52 ns", 123456 -> "123 µs".
func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}
