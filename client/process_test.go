package client_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// Environment of a helper process (TestHelperProcess).
const (
	envHelper   = "RATION_CLIENT_HELPER" // "1" in a helper process
	envServers  = "RATION_SERVERS"       // comma-separated gRPC addresses
	envClientID = "RATION_CLIENT_ID"
	envStart    = "RATION_START_UNIX_NANO" // the shared start, wall clock
	envEnd      = "RATION_END_UNIX_NANO"   // stop offering load at this wall-clock time
	envPeriod   = "RATION_PERIOD"          // offer one request every this long
)

// TestSeparateProcesses runs three clients as separate OS processes (this
// test binary re-executed as TestHelperProcess) against an in-process
// cluster. Each offers r (75 requests/s, costs 1, 1, 2: 3·r in total) and
// prints its admissions;
// the parent merges them and checks the bound over every window.
//
// Time reference: the processes share no monotonic clock, so each stamps
// its admissions with the wall clock (time.Now().UnixNano()) minus a
// start instant the parent chose on the same wall clock. On one machine
// every process reads the same system clock, so the stamps are on one
// time line; that clock is the reference real time here. (An NTP slew
// during the run would change its rate by at most ~500 ppm for all
// processes alike, less than the ρ = 1000 ppm the policy allows; a step
// would show up as a jump and could fail the check.)
func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts client processes that load a cluster for ~6s")
	}
	c := startCluster(t, steadyPolicy)
	const procs, run = 3, 6 * time.Second
	start := time.Now().UnixNano()
	end := start + run.Nanoseconds()
	type result struct {
		who string
		out []byte
		err error
	}
	results := make([]result, procs)
	var wg sync.WaitGroup
	for i := range procs {
		who := fmt.Sprintf("proc-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), run+60*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(),
			envHelper+"=1",
			envServers+"="+strings.Join(servers(c), ","),
			envClientID+"="+who,
			envStart+"="+strconv.FormatInt(start, 10),
			envEnd+"="+strconv.FormatInt(end, 10),
			envPeriod+"="+(time.Second/75).String(), // 75 requests/s, 100 tokens/s each
		)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("%v; stderr:\n%s", err, stderr.String())
			}
			results[i] = result{who: who, out: out, err: err}
		}()
	}
	wg.Wait()

	var h []quotacheck.Admission
	per := map[string]int64{}
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.who, r.err)
		}
		done := false
		sc := bufio.NewScanner(bytes.NewReader(r.out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "ADMIT":
				at, err1 := strconv.ParseInt(f[1], 10, 64)
				cost, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 != nil || err2 != nil || cost <= 0 {
					t.Fatalf("%s: bad line %q", r.who, sc.Text())
				}
				h = append(h, quotacheck.Admission{AtNanos: at, CostMilli: cost, Who: r.who})
				per[r.who] += cost
			case len(f) >= 1 && f[0] == "DONE":
				done = true
				t.Logf("%s: %s", r.who, sc.Text())
			}
		}
		if !done {
			t.Fatalf("%s did not finish; output:\n%s", r.who, r.out)
		}
	}
	bound := quotacheck.Bound{CapacityMilli: 50_000, RateMilliPerSec: 100_000}
	checkBound(t, "three processes", h, bound)
	reportWindows(t, h, bound, 100*time.Millisecond, time.Second, run)
	for who, n := range per {
		t.Logf("%s admitted %.0f tokens", who, float64(n)/1000)
		if n == 0 {
			t.Errorf("%s admitted nothing", who)
		}
	}
	// The processes need a moment to start (and, one after the other, to
	// get a share); over the last 3s they must use most of r.
	tail := admittedIn(h, run-3*time.Second, run+time.Second)
	t.Logf("last 3s: %.1f tokens admitted, r·3s = 300", float64(tail)/1000)
	if tail < 270_000 {
		t.Errorf("only %.1f tokens admitted in the last 3s, want >= 90%% of r·3s", float64(tail)/1000)
	}
}

// TestHelperProcess is a client process of TestSeparateProcesses; it does
// nothing unless RATION_CLIENT_HELPER=1. It offers one request every
// RATION_PERIOD (costs 1, 1, 2, ...) until RATION_END_UNIX_NANO and writes
// "ADMIT <wall-clock ns since RATION_START_UNIX_NANO> <milli-cost>" for
// every admission, then "DONE ...", on stdout.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		return
	}
	start, err1 := strconv.ParseInt(os.Getenv(envStart), 10, 64)
	end, err2 := strconv.ParseInt(os.Getenv(envEnd), 10, 64)
	period, err3 := time.ParseDuration(os.Getenv(envPeriod))
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "helper: bad environment", err1, err2, err3)
		os.Exit(2)
	}
	cl, err := client.New(context.Background(), client.Config{
		Servers: strings.Split(os.Getenv(envServers), ","), ClientID: os.Getenv(envClientID)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	lim := cl.Limiter("writes", client.Key{"tenant": "processes"})
	w := bufio.NewWriter(os.Stdout)
	reasons := map[client.Reason]int{}
	// Each wakeup makes every request due by then (counted from the first
	// tick), so a process woken late (a loaded machine drops ticker ticks)
	// catches up instead of offering less.
	tick := time.NewTicker(period)
	begin := time.Now()
	for n := 0; time.Now().UnixNano() < end; {
		<-tick.C
		for due := int(time.Since(begin) / period); n < due && time.Now().UnixNano() < end; n++ {
			cost := int64(1 + n%3/2)
			d := lim.AllowN(cost)
			at := time.Now().UnixNano() - start
			reasons[d.Reason]++
			if d.Allowed {
				fmt.Fprintf(w, "ADMIT %d %d\n", at, cost*1000)
			}
		}
	}
	tick.Stop()
	closeErr := cl.Close()
	fmt.Fprintf(w, "DONE decisions=%v close=%v\n", reasons, closeErr)
	if err := w.Flush(); err != nil {
		os.Exit(2)
	}
}
