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

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/simulate"
)

const simulatePrefix = "rationctl simulate"

func simulateUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rationctl simulate --policy FILE --trace FILE [--mode compare|chain]
                     [--group-by COL[,COL]] [--json] [--decisions FILE]

Replays a CSV request trace against the policies in a policy file, with the
same limiter code the replicas run, and reports what each policy accepts and
rejects.

The trace has a header line. at_ms (required) is the request time in
milliseconds since the trace start (up to 3 decimals, never decreasing);
cost (optional, default 1) is a whole number >= 1; every other column is an
attribute that policies can key on and --group-by can break results down by.

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
	policyPath, tracePath, mode, groupBy, decisionsPath string
	json                                                bool
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
	return fs, c
}

// runSimulate implements "rationctl simulate".
func runSimulate(args []string, stdout, stderr io.Writer) int {
	fs, c := simulateFlags()
	fs.SetOutput(io.Discard) // errors are reported below, with the prefix
	fs.Usage = func() {}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", simulatePrefix, fmt.Sprintf(format, a...))
		fmt.Fprintf(stderr, "Run 'rationctl simulate -h' for usage.\n")
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			simulateUsage(stdout)
			return 0
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
	mode, err := simulate.ParseMode(c.mode)
	if err != nil {
		return usageErr("--%v", err)
	}
	var groupBy []string
	if c.groupBy != "" {
		groupBy = strings.Split(c.groupBy, ",")
		for i, g := range groupBy {
			groupBy[i] = strings.TrimSpace(g)
			if groupBy[i] == "" {
				return usageErr("--group-by %q has an empty column name; want COL[,COL]", c.groupBy)
			}
		}
	}

	fail := func(err error) int {
		printErr(stderr, simulatePrefix, err)
		return 1
	}
	pf, err := policy.ParseFile(c.policyPath)
	if err != nil {
		return fail(err)
	}
	trace, err := os.Open(c.tracePath)
	if err != nil {
		return fail(err)
	}
	defer trace.Close()

	opts := simulate.Options{Mode: mode, GroupBy: groupBy}
	var decisions *os.File
	if c.decisionsPath != "" {
		if decisions, err = os.Create(c.decisionsPath); err != nil {
			return fail(err)
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
		return fail(err)
	}

	out := bufio.NewWriter(stdout)
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
	if err != nil {
		return fail(err)
	}
	return 0
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
