package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// "rationd health" asks a running rationd or rationd edge on the same
// host whether it is ready (GET /readyz on its --http-addr) or alive
// (/livez), and exits 0 if so, 1 if not: a container healthcheck for an
// image with no shell or curl (the image is FROM scratch). Like every
// flag, --http-addr is also read from RATION_HTTP_ADDR, so in a container
// configured by the environment "rationd health" alone checks the
// process beside it.

type healthOptions struct {
	httpAddr string
	live     bool
	timeout  time.Duration
}

func healthFlags(o *healthOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("rationd health", flag.ContinueOnError)
	fs.StringVar(&o.httpAddr, "http-addr", o.httpAddr,
		"`HOST:PORT` of the rationd or rationd edge HTTP listener to ask (0.0.0.0 or an empty host: loopback); required")
	fs.BoolVar(&o.live, "live", o.live, "ask /livez (the process answers) instead of /readyz (it can serve)")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "give up after `D`")
	return withEnvUsage(fs)
}

func healthUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rationd health --http-addr HOST:PORT [--live] [--timeout 3s]

Asks a rationd or rationd edge on this host for GET /readyz (with --live,
/livez) on its --http-addr, prints the answer, and exits 0 if it is 200,
1 otherwise: a container healthcheck that needs no shell or curl.
--http-addr is also read from $RATION_HTTP_ADDR, as the server reads it.
Plain HTTP only: a server's --http-addr always is; an edge with TLS
serves its HTTP port over mutual TLS, which this does not speak.

Flags:
`)
	o := healthOptions{timeout: 3 * time.Second}
	fs := healthFlags(&o)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// runHealth implements "rationd health".
func runHealth(args []string, stdout, stderr io.Writer) int {
	o := healthOptions{timeout: 3 * time.Second}
	env, err := parseArgs(healthFlags(&o), args)
	if errors.Is(err, flag.ErrHelp) {
		healthUsage(stdout)
		return 0
	}
	if err == nil {
		switch {
		case o.httpAddr == "":
			err = usageErrorf("--http-addr is required")
		case o.timeout <= 0:
			err = usageErrorf("--timeout must be positive")
		}
	}
	var url string
	if err == nil {
		url, err = healthURL(o.httpAddr, o.live)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd health: %v\n\n", env.explain(err))
		healthUsage(stderr)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "rationd health: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "rationd health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "rationd health: %s: %s\n%s", url, resp.Status, body)
		return 1
	}
	_, _ = stdout.Write(body)
	return 0
}

// healthURL is the probe's URL for a listener's address: an unspecified
// or empty host (what a server binds) is asked on loopback.
func healthURL(addr string, live bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usageErrorf("--http-addr %q is not HOST:PORT", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	path := "/readyz"
	if live {
		path = "/livez"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
