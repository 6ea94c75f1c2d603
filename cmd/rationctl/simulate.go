package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/simulate"
)

const simulatePrefix = "rationctl simulate"

func simulateUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rationctl simulate --policy FILE --trace FILE [--mode compare|chain]
                     [--group-by COL[,COL]] [--json] [--decisions FILE]
                     [--start RFC3339] [--queue-wait DURATION]

Replays a CSV request trace against the policies in a policy file, with the
same limiter code the replicas run, and reports what each policy accepts and
rejects.

The trace has a header line. at_ms is the request time in milliseconds
since the trace start (up to 3 decimals, never decreasing); instead of it, an
at column (RFC 3339 times) or a unix_ms column (milliseconds since the Unix
epoch) puts the trace on the wall clock. cost (optional, default 1) is a
whole number >= 1; duration_ms (required by concurrency policies) is a
request's running time. estimate and actual (optional) are a cost known
only after the work: the row is admitted by its estimate and settled with
its actual (empty: the estimate) at at_ms + duration_ms, or at once
without duration_ms; token buckets refund, or charge into debt down to
max_debt and report the rest as excess. Every other column is an attribute that policies can
key on and --group-by can break results down by.

Windows: with --start (or an at / unix_ms column) window policies count in
the windows the cluster leases: multiples of the window from the Unix epoch,
or calendar days, ISO weeks and months in the policy's timezone. Without
them, at_ms 0 is time 0 and windows are aligned to the trace start.

Modes:
  compare  every policy sees the whole trace on its own (default)
  chain    a request must pass every policy in file order; the first
           rejection stops it and refunds what earlier policies took

Flags:
`)
	fs, _ := simulateFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Exit status: 0 on success, 1 if the files are invalid or unreadable,
2 on a usage error. See docs/simulate.md.
`)
}

type simulateConfig struct {
	policyPath, tracePath, mode, groupBy, decisionsPath, start string
	json                                                       bool
	queueWait                                                  time.Duration
}

func simulateFlags() (*flag.FlagSet, *simulateConfig) {
	c := &simulateConfig{}
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.StringVar(&c.policyPath, "policy", "", "policy `FILE` (YAML); required")
	fs.StringVar(&c.tracePath, "trace", "", "trace `FILE` (CSV with a header); required")
	fs.StringVar(&c.mode, "mode", "compare", "how policies combine: compare or chain")
	fs.StringVar(&c.groupBy, "group-by", "", "also count per value of these trace columns: `COL[,COL]`")
	fs.BoolVar(&c.json, "json", false, "print the result as JSON instead of a table")
	fs.StringVar(&c.decisionsPath, "decisions", "", "write one CSV row per request per policy decision to `FILE`")
	fs.StringVar(&c.start, "start", "", "the wall-clock `TIME` (RFC 3339) of at_ms 0, so windows fall where the cluster puts them; default: windows aligned to the trace start")
	fs.DurationVar(&c.queueWait, "queue-wait", 0, "how long a request waits (FIFO) for a concurrency slot before it is rejected; 0: no queue")
	return fs, c
}

// runSimulate implements "rationctl simulate".
func runSimulate(args []string, stdout, stderr io.Writer) int {
	c, opts, code, ok := parseSimulateArgs(args, stdout, stderr)
	if !ok {
		return code
	}
	fail := func(err error) int {
		printErr(stderr, simulatePrefix, err)
		return 1
	}
	res, err := c.replay(opts)
	if err != nil {
		return fail(err)
	}
	if err := c.print(stdout, res); err != nil {
		return fail(err)
	}
	return 0
}

// parseSimulateArgs parses and checks the flags into the replay's options.
// ok is false when runSimulate is done: help was asked for (code 0) or the
// flags are wrong (code 2, reported on stderr).
func parseSimulateArgs(args []string, stdout, stderr io.Writer) (c *simulateConfig, opts simulate.Options, code int, ok bool) {
	fs, c := simulateFlags()
	fs.SetOutput(io.Discard) // errors are reported below, with the prefix
	fs.Usage = func() {}
	usageErr := func(format string, a ...any) (*simulateConfig, simulate.Options, int, bool) {
		fmt.Fprintf(stderr, "%s: %s\n", simulatePrefix, fmt.Sprintf(format, a...))
		fmt.Fprintf(stderr, "Run 'rationctl simulate -h' for usage.\n")
		return c, opts, 2, false
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			simulateUsage(stdout)
			return c, opts, 0, false
		}
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q; every input is a flag", fs.Arg(0))
	}
	var missing []string
	if c.policyPath == "" {
		missing = append(missing, "--policy")
	}
	if c.tracePath == "" {
		missing = append(missing, "--trace")
	}
	if len(missing) > 0 {
		verb := " is"
		if len(missing) > 1 {
			verb = " are"
		}
		return usageErr("%s%s required", strings.Join(missing, " and "), verb)
	}
	opts, err := c.options()
	if err != nil {
		return usageErr("%v", err)
	}
	return c, opts, 0, true
}

// options turns the mode, --group-by, --start and --queue-wait flags into
// the replay's options; an error is a usage error naming the flag.
func (c *simulateConfig) options() (simulate.Options, error) {
	mode, err := simulate.ParseMode(c.mode)
	if err != nil {
		return simulate.Options{}, fmt.Errorf("--%v", err)
	}
	var groupBy []string
	if c.groupBy != "" {
		groupBy = strings.Split(c.groupBy, ",")
		for i, g := range groupBy {
			groupBy[i] = strings.TrimSpace(g)
			if groupBy[i] == "" {
				return simulate.Options{}, fmt.Errorf("--group-by %q has an empty column name; want COL[,COL]", c.groupBy)
			}
		}
	}
	var start *time.Time
	if c.start != "" {
		t, err := time.Parse(time.RFC3339Nano, c.start)
		if err != nil {
			return simulate.Options{}, fmt.Errorf("--start %q is not an RFC 3339 time; want a time like 2026-03-28T23:00:00+01:00 or 2026-03-28T22:00:00Z", c.start)
		}
		start = &t
	}
	if c.queueWait < 0 {
		return simulate.Options{}, fmt.Errorf("--queue-wait %v is negative; want 0 (no queue) or a wait like 250ms", c.queueWait)
	}
	return simulate.Options{Mode: mode, GroupBy: groupBy, Start: start, QueueWait: c.queueWait}, nil
}

// replay reads the policy file and replays the trace file against it,
// writing --decisions if asked; a decisions file of a failed replay is
// removed. Trace problems are prefixed with the trace's path.
func (c *simulateConfig) replay(opts simulate.Options) (*simulate.Result, error) {
	pf, err := policy.ParseFile(c.policyPath)
	if err != nil {
		return nil, err
	}
	trace, err := os.Open(c.tracePath)
	if err != nil {
		return nil, err
	}
	defer trace.Close()

	var decisions *os.File
	if c.decisionsPath != "" {
		if decisions, err = os.Create(c.decisionsPath); err != nil {
			return nil, err
		}
		opts.Decisions = decisions
	}
	res, err := simulate.Run(pf.Policies, trace, opts)
	if decisions != nil {
		if cerr := decisions.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(c.decisionsPath) // incomplete: do not leave it looking valid
		}
	}
	if err != nil {
		var te *simulate.TraceError
		if errors.As(err, &te) || errors.Is(err, simulate.ErrInvalidTrace) {
			err = prefixLines(c.tracePath+": ", err)
		}
		return nil, err
	}
	return res, nil
}

// print writes the result to stdout: a table, or JSON with --json.
func (c *simulateConfig) print(stdout io.Writer, res *simulate.Result) error {
	out := bufio.NewWriter(stdout)
	var err error
	if c.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = simulate.WriteTable(out, res)
	}
	if err == nil {
		err = out.Flush()
	}
	return err
}

// prefixLines puts p in front of every line of err's message.
func prefixLines(p string, err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i := range lines {
		lines[i] = p + lines[i]
	}
	return &prefixedError{msg: strings.Join(lines, "\n"), err: err}
}

type prefixedError struct {
	msg string
	err error
}

func (e *prefixedError) Error() string { return e.msg }
func (e *prefixedError) Unwrap() error { return e.err }
