// Command rationctl is ration's admin CLI.
//
//	rationctl [--servers S] [--timeout D] [--json] <command> [flags]
//
// Commands:
//
//	simulate   replay a request trace against a policy file (offline)
//	status     the leader, Raft indexes and every server's state and health
//	members    the gossip members
//	policy     apply -f FILE [--prune] | diff -f FILE | get NAME | list | delete NAME
//	leases     who holds which lease, and each key's pool
//	loadgen    run simulated client replicas against a policy and check the quota bound
//	snapshot   save FILE | restore FILE
//	leader     transfer [ID]
//	server     remove ID
//	keyring    list | install KEY | use KEY | remove KEY | generate
//	acl        bootstrap | token create | token list | token delete ACCESSOR
//	tls        ca create | cert create --server|--client
//	windows    status | resync [--max-step D] [--dry-run]
//	completion bash | zsh: a shell completion script
//	version    rationctl's version and every server's [--client]
//	help       show help for rationctl or a command
//
// docs/cli.md is every command's help, generated from the table below
// (reference.go).
// Every command is a function run(args, stdout, stderr) int registered in
// commands below; it returns the exit code: 0 success, 1 failure (an error
// from the server, with its gRPC code, or of I/O), 2 usage error.
//
// # DESIGN
//
// The cluster commands are verbs (admin.go): a declaration of their
// arguments and flags plus a run function over a connected
// api.AdminClient. runVerb does the rest the same way for all of them:
// flags anywhere on the line, the common --servers/--timeout/--json,
// usage errors, connecting to the first server that answers, and turning a
// gRPC status into "rationctl <cmd>: Code: message". Rendering (render.go)
// is separate from calling so tables and JSON are tested from canned
// responses. rationctl talks to the cluster through the public API only
// (package api; its own version comes from internal/version), never the
// coordinator: it works against any server that speaks the API.
package main

import (
	"flag"
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
	// group: the first argument is a verb (policy get); nested: the first
	// words of its two-word verbs (acl token create).
	group  bool
	nested map[string]bool
	// verbs are the command's verbs (one for a single one), and flagSet,
	// for a command that is not made of verbs, its flags: the CLI
	// reference and the completion scripts read them (reference.go).
	verbs   []verb
	flagSet func() *flag.FlagSet
}

// commands lists the subcommands in the order help shows them. A new
// cluster command is a verb (admin.go) registered here with single or
// group.
var commands = []command{
	{name: "simulate", summary: "replay a request trace against a policy file", run: runSimulate, usage: simulateUsage,
		flagSet: func() *flag.FlagSet { fs, _ := simulateFlags(); return fs }},
	single(statusVerb),
	single(membersVerb),
	group("policy", "apply -f FILE [--prune] | diff -f FILE | import --envoy FILE | get NAME | list | delete NAME: manage the stored policies", policyVerbs),
	single(leasesVerb),
	group("lease", "acquire --policy P [--key A=V,...]: take a lease as a client would (for trying a policy out)", leaseVerbs),
	loadgenCommand(),
	group("snapshot", "save FILE | restore FILE: save or restore the cluster state", snapshotVerbs),
	group("leader", "transfer [ID]: hand leadership to another server", leaderVerbs),
	group("server", "remove ID: remove a server from the Raft configuration", serverVerbs),
	group("keyring", "list | install KEY | use KEY | remove KEY | generate: rotate the gossip encryption keys", keyringVerbs),
	group("acl", "bootstrap | token create --role R ... | token list | token delete ACCESSOR: ACL tokens", aclVerbs),
	group("tls", "ca create | cert create --server|--client: make a CA and certificates for mutual TLS (local)", tlsVerbs),
	group("windows", "status | resync [--max-step D] [--dry-run]: window time against the leader's wall clock, and an operator's re-sync", windowsVerbs),
	single(versionVerb),
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		// rationctl's own, as rationd --version says rationd's.
		args = append([]string{"version", "--client"}, args[1:]...)
	}
	globals, args, err := splitGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "rationctl: %v\n", err)
		return 2
	}
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
	return c.run(withGlobals(c, globals, rest), stdout, stderr)
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
	fmt.Fprint(w, "Usage:\n  rationctl [--servers S] [--timeout D] [--json] <command> [flags]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "help", "show this help, or a command's: rationctl help <command>")
	tw.Flush()
	fmt.Fprintf(w, `
The cluster commands take --servers HOST:PORT[,HOST:PORT], the servers
to try in order until one answers (default $%s, else %s),
and --timeout (default %v); those that read take --json. These three
go before the command or after it, in any order with its own flags, and so
do --tls-ca-file, --tls-cert-file, --tls-key-file and --tls-server-name
(default $RATION_TLS_CA_FILE, $RATION_TLS_CERT_FILE, $RATION_TLS_KEY_FILE,
$RATION_TLS_SERVER_NAME) for a cluster with TLS, and --token or
--token-file (default $RATION_TOKEN, $RATION_TOKEN_FILE) for a cluster
with ACLs (docs/security.md).

Run 'rationctl <command> -h' for a command's flags.
`, serversEnv, defaultServers, defaultTimeout)
}

// printErr writes err to stderr with the prefix on every line, so that each
// of several joined errors stays greppable.
func printErr(stderr io.Writer, prefix string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s: %s\n", prefix, line)
	}
}
