package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// The admin commands talk to the cluster through the public gRPC API only
// (api.AdminClient, api.LeasesClient), never the coordinator package: the
// CLI works against any server that speaks the API.

// serversEnv names the environment variable --servers defaults to.
const serversEnv = "RATION_SERVERS"

// defaultServers is used when neither --servers nor RATION_SERVERS is set:
// node 1 of `make cluster`, and `rationd dev`.
const defaultServers = "127.0.0.1:7400"

// defaultTimeout bounds connecting and, separately, the call.
const defaultTimeout = 5 * time.Second

// verb is one admin command: "status", or one verb of a group such as
// "policy apply".
type verb struct {
	name     string // the words after rationctl: "policy apply"
	synopsis string // arguments and own flags: "-f FILE"
	summary  string
	help     string // what it does, for -h; optional
	// args names the positional arguments: "NAME" is required, "[ID]"
	// optional.
	args []string
	// reads: the command prints cluster state and takes --json.
	reads bool
	// flags declares the command's own flags into o.
	flags func(fs *flag.FlagSet, o *invocation)
	// check validates the parsed invocation before connecting; its errors
	// are usage errors.
	check func(o *invocation) error
	// prepare does the local work (reading a file) before connecting; its
	// errors are I/O errors.
	prepare func(o *invocation) error
	run     func(ctx context.Context, o *invocation) error
	// local: run needs no cluster (no connection is made).
	local bool
	// failCode, if not 0, is the exit status of a failure (policy diff:
	// 2, since 1 means "changes"). A run that returns an exitCode exits
	// with it, printing nothing.
	failCode int
}

// invocation is one run of an admin command: its flags, arguments and,
// once connected, the connection.
type invocation struct {
	servers string
	timeout time.Duration
	json    bool
	tlsOpts tlsOptions // tls.go
	tls     *tls.Config
	tokOpts tokenOptions // token.go
	token   string
	// Command-specific flags.
	file, policy, key string
	prune             bool // policy apply --prune
	stale             bool // snapshot save --stale
	ifLeader          bool // leader transfer --if-leader
	client, attrs     string
	rate, burst       string
	// acl bootstrap --secret-file: the path, and the file prepare created.
	secretFile string
	secretOut  *os.File
	// status: the autopilot thresholds (autopilot.go).
	maxLastContact  time.Duration
	maxTrailingLogs uint64

	args  []string
	data  []byte // what prepare read
	envoy string // policy import --envoy: FILE[,FILE]
	// acl token create (acl.go)
	aclRole, aclName      string
	aclBind, aclClientIDs stringList
	// version --client (version.go)
	clientOnly bool
	// windows resync (windows.go)
	maxStep time.Duration
	dryRun  bool
	// tls ca|cert create (tlsgen.go)
	tlsGenOpts *tlsGenOptions
	stdout     io.Writer

	conn *grpc.ClientConn
	addr string // the server the connection reached
}

func (o *invocation) admin() api.AdminClient { return api.NewAdminClient(o.conn) }

func (o *invocation) tlsGen() *tlsGenOptions {
	if o.tlsGenOpts == nil {
		o.tlsGenOpts = &tlsGenOptions{}
	}
	return o.tlsGenOpts
}

// verbFlags declares the flags of v (common and own) into a new flag set.
func verbFlags(v verb, o *invocation) *flag.FlagSet {
	fs := flag.NewFlagSet(v.name, flag.ContinueOnError)
	fs.StringVar(&o.servers, "servers", "",
		"servers to try in order, `HOST:PORT[,HOST:PORT]` (default $"+serversEnv+", else "+defaultServers+")")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "bound on connecting, and on the call")
	tlsFlags(fs, &o.tlsOpts)
	tokenFlags(fs, &o.tokOpts)
	if v.reads {
		fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	}
	if v.flags != nil {
		v.flags(fs, o)
	}
	return fs
}

func verbUsage(v verb, w io.Writer) {
	fmt.Fprintf(w, "Usage:\n  rationctl %s", v.name)
	if v.synopsis != "" {
		fmt.Fprintf(w, " %s", v.synopsis)
	}
	fmt.Fprintf(w, " [flags]\n\n%s\n", strings.TrimSpace(firstNonEmpty(v.help, v.summary)))
	fmt.Fprint(w, "\nFlags:\n")
	fs := verbFlags(v, &invocation{})
	fs.SetOutput(w)
	fs.PrintDefaults()
	if v.failCode == 0 {
		fmt.Fprint(w, "\nExit status: 0 on success, 1 on an error from the server or of I/O, 2 on a usage error.\n")
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// runVerb parses args for v, connects and runs it; it returns the exit code.
func runVerb(v verb, args []string, stdout, stderr io.Writer) int {
	prefix := "rationctl " + v.name
	o := &invocation{stdout: stdout}
	fs := verbFlags(v, o)
	fs.SetOutput(io.Discard) // errors are reported below, with the prefix
	fs.Usage = func() {}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		fmt.Fprintf(stderr, "Run 'rationctl %s -h' for usage.\n", v.name)
		return 2
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		verbUsage(v, stdout)
		return 0
	}
	if err != nil {
		return usageErr(err)
	}
	if err := checkArgs(v.args, pos); err != nil {
		return usageErr(err)
	}
	o.args = pos
	servers, err := o.serverList()
	if err != nil {
		return usageErr(err)
	}
	if o.timeout <= 0 {
		return usageErr(fmt.Errorf("--timeout %v must be positive", o.timeout))
	}
	if v.check != nil {
		if err := v.check(o); err != nil {
			return usageErr(err)
		}
	}
	if o.tls, err = o.tlsOpts.config(); err != nil {
		return usageErr(err)
	}
	activeTLS = o.tls
	if o.token, err = o.tokOpts.secret(); err != nil {
		return usageErr(err)
	}
	activeToken = o.token

	fail := func(err error) int {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		printErr(stderr, prefix, describe(err, o.timeout))
		if v.failCode != 0 {
			return v.failCode
		}
		return 1
	}
	if v.prepare != nil {
		if err := v.prepare(o); err != nil {
			return fail(err)
		}
	}
	if !v.local {
		if o.conn, o.addr, err = connect(servers, o.timeout); err != nil {
			return fail(err)
		}
		defer o.conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := v.run(ctx, o); err != nil {
		return fail(err)
	}
	return 0
}

// parseInterspersed parses flags anywhere among the arguments ("policy get
// NAME --json" as well as "policy get --json NAME") and returns the
// positional ones. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkArgs matches positional arguments against their names: "NAME" is
// required, "[ID]" optional.
func checkArgs(names, got []string) error {
	required := 0
	for _, n := range names {
		if !strings.HasPrefix(n, "[") {
			required++
		}
	}
	if len(got) < required {
		return fmt.Errorf("%s is required", names[len(got)])
	}
	if len(got) > len(names) {
		return fmt.Errorf("unexpected argument %q", got[len(names)])
	}
	return nil
}

// serverList resolves --servers, then RATION_SERVERS, then the default.
func (o *invocation) serverList() ([]string, error) {
	from, v := "--servers", o.servers
	if v == "" {
		if env := os.Getenv(serversEnv); env != "" {
			from, v = serversEnv, env
		} else {
			v = defaultServers
		}
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if _, _, err := net.SplitHostPort(s); err != nil || s == "" {
			return nil, fmt.Errorf("%s %q: %q is not HOST:PORT", from, v, s)
		}
		out = append(out, s)
	}
	return out, nil
}

// connect returns a connection to the first server, in order, that
// accepts one. Any server will do: each forwards what needs the leader.
// Each server gets an equal share of timeout, at least a second.
func connect(servers []string, timeout time.Duration) (*grpc.ClientConn, string, error) {
	per := max(timeout/time.Duration(len(servers)), time.Second)
	deadline := time.Now().Add(timeout)
	var failures []string
	for _, addr := range servers {
		d := time.Now().Add(per)
		if d.After(deadline) {
			d = deadline
		}
		conn, err := dialReady(addr, d)
		if err == nil {
			return conn, addr, nil
		}
		failures = append(failures, fmt.Sprintf("%s: %v", addr, err))
		if !time.Now().Before(deadline) {
			break
		}
	}
	return nil, "", rpcerr.Errorf(codes.Unavailable, "no server answered (%s)", strings.Join(failures, "; "))
}

// dialReady connects to addr and waits until the connection is ready, or
// has failed, or the deadline passes. It reports the dial error itself
// ("connection refused") rather than gRPC's state name.
func dialReady(addr string, deadline time.Time) (*grpc.ClientConn, error) {
	var mu sync.Mutex
	var dialErr error
	dialer := func(ctx context.Context, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err != nil {
			mu.Lock()
			dialErr = err
			mu.Unlock()
		}
		return c, err
	}
	record := func(err error) {
		mu.Lock()
		dialErr = err
		mu.Unlock()
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		dialOptions(grpc.WithTransportCredentials(recordingCreds{transportCreds(), record}), grpc.WithContextDialer(dialer))...)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return conn, nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			conn.Close()
			mu.Lock()
			defer mu.Unlock()
			if dialErr != nil {
				return nil, dialErr
			}
			if activeTLS != nil {
				return nil, fmt.Errorf("connection failed (%s; with TLS, the server may have refused this client's certificate: is it signed by the cluster's CA?)", s)
			}
			return nil, fmt.Errorf("connection failed (%s; a server with TLS refuses plaintext: --tls-ca-file, --tls-cert-file, --tls-key-file)", s)
		}
		if !conn.WaitForStateChange(ctx, s) {
			conn.Close()
			return nil, fmt.Errorf("no answer within %v", time.Since(start).Round(time.Millisecond))
		}
	}
}

// describe renders err for the user: a gRPC status as "Code: message", a
// client-side timeout with the --timeout that caused it, anything else
// (I/O) as it is.
func describe(err error, timeout time.Duration) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := s.Message()
	if s.Code() == codes.DeadlineExceeded && msg == context.DeadlineExceeded.Error() {
		msg += fmt.Sprintf(" (after --timeout %v)", timeout)
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = s.Code().String() + ": " + l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// group is a command made of verbs: "policy apply", "policy get", ...
func group(name, summary string, verbs []verb) command {
	// nested: the first words of two-word verbs ("token" of "acl token list").
	nested := map[string]bool{}
	for _, v := range verbs {
		if w := strings.Fields(v.name); len(w) == 3 {
			nested[w[1]] = true
		}
	}
	find := func(w string) (verb, bool) {
		for _, v := range verbs {
			if v.name == name+" "+w {
				return v, true
			}
		}
		return verb{}, false
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		tw := newTable(w)
		for _, v := range verbs {
			fmt.Fprintf(tw, "  rationctl %s %s\t%s\n", v.name, v.synopsis, v.summary)
		}
		tw.Flush()
		fmt.Fprintf(w, "\nRun 'rationctl %s <command> -h' for a command's flags.\n", name)
	}
	run := func(args []string, stdout, stderr io.Writer) int {
		if len(args) == 0 {
			fmt.Fprintf(stderr, "rationctl %s: missing command; want %s\n", name, verbNames(name, verbs))
			usage(stderr)
			return 2
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			usage(stdout)
			return 0
		}
		words := 1
		if nested[args[0]] {
			// "acl token create": the verb is two words.
			if len(args) < 2 || strings.HasPrefix(args[1], "-") {
				fmt.Fprintf(stderr, "rationctl %s %s: missing command; want %s\n", name, args[0], verbNames(name, verbs))
				usage(stderr)
				return 2
			}
			words = 2
		}
		v, ok := find(strings.Join(args[:words], " "))
		if !ok {
			fmt.Fprintf(stderr, "rationctl %s: unknown command %q; want %s\n", name, strings.Join(args[:words], " "), verbNames(name, verbs))
			usage(stderr)
			return 2
		}
		return runVerb(v, args[words:], stdout, stderr)
	}
	return command{name: name, summary: summary, run: run, usage: usage, group: true, nested: nested, verbs: verbs}
}

func verbNames(group string, verbs []verb) string {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = strings.TrimPrefix(v.name, group+" ")
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// single is a command that is one verb: "status".
func single(v verb) command {
	return command{
		name: v.name, summary: v.summary,
		run:   func(args []string, stdout, stderr io.Writer) int { return runVerb(v, args, stdout, stderr) },
		usage: func(w io.Writer) { verbUsage(v, w) },
		verbs: []verb{v},
	}
}
