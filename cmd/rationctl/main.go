// Command rationctl is ration's admin CLI.
//
//	rationctl <command> [flags]
//
// Commands:
//
//	simulate   replay a request trace against a policy file
//	help       show help for rationctl or a command
//
// Every command is a function run<Name>(args, stdout, stderr) int registered
// in commands below; it returns the exit code: 0 success, 1 failure, 2 usage
// error.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// run executes the command with the arguments after its name.
	run func(args []string, stdout, stderr io.Writer) int
	// usage writes the command's help.
	usage func(w io.Writer)
}

// commands lists the subcommands in the order help shows them. Add new ones
// here (status, policies, leases, snapshot, loadgen, ...): each gets a
// run<Name>(args, stdout, stderr) int in its own file.
var commands = []command{
	{name: "simulate", summary: "replay a request trace against a policy file", run: runSimulate, usage: simulateUsage},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			if c, ok := lookup(rest[0]); ok {
				c.usage(stdout)
				return 0
			}
			fmt.Fprintf(stderr, "rationctl help: unknown command %q\n", rest[0])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "rationctl: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	return c.run(rest, stdout, stderr)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprint(w, "rationctl is the admin CLI of ration, the distributed quota-leasing rate limiter.\n\n")
	fmt.Fprint(w, "Usage:\n  rationctl <command> [flags]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "help", "show this help, or a command's: rationctl help <command>")
	tw.Flush()
	fmt.Fprint(w, "\nRun 'rationctl <command> -h' for a command's flags.\n")
}

// printErr writes err to stderr with the prefix on every line, so that each
// of several joined errors stays greppable.
func printErr(stderr io.Writer, prefix string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s: %s\n", prefix, line)
	}
}
