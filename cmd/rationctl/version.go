package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/version"
)

// versionVerb prints rationctl's own build and, unless --client, every
// server's as the Status RPC reports it (askAll: each server is asked for
// its own), so a cluster half way through an upgrade shows its mix.
var versionVerb = verb{
	name:     "version",
	synopsis: "[--client]",
	summary:  "show rationctl's version and every server's",
	help: `Prints rationctl's version, VCS revision and Go version, then each server of
the Raft configuration with the version and revision it reports (its own
Status answer; "-" for a server that did not answer, "(unknown)" for one
too old to report it). With --client, only rationctl's, without a cluster.

Exit status 1 when no server answers (rationctl's own version is printed
first all the same).

--json prints {"client": {"version", "revision", "goversion", "platform"},
"servers": [{"id", "grpc_address", "answered", "version", "revision"}]}.`,
	reads: true,
	local: true, // run connects itself: the client's version comes first
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.BoolVar(&o.clientOnly, "client", false, "only rationctl's own version; connect to no server")
	},
	run: runVersion,
}

type versionJSON struct {
	Client  clientVersionJSON    `json:"client"`
	Servers *[]serverVersionJSON `json:"servers,omitempty"`
}

type clientVersionJSON struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goversion"`
	Platform  string `json:"platform"`
}

type serverVersionJSON struct {
	ID          string `json:"id"`
	GRPCAddress string `json:"grpc_address"`
	Answered    bool   `json:"answered"`
	Version     string `json:"version"`
	Revision    string `json:"revision"`
}

func runVersion(ctx context.Context, o *invocation) error {
	in := version.Get()
	out := versionJSON{Client: clientVersionJSON{Version: in.Version, Revision: in.Revision, GoVersion: in.GoVersion, Platform: in.Platform}}
	if !o.json {
		fmt.Fprintf(o.stdout, "rationctl %s\n", in)
	}
	if o.clientOnly {
		if o.json {
			return writeJSON(o.stdout, out)
		}
		return nil
	}
	servers, err := o.serverList()
	if err != nil {
		return err
	}
	conn, _, err := connect(servers, o.timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	first, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{})
	if err != nil {
		return err
	}
	answers := askAll(ctx, first, servers)
	list := []serverVersionJSON{}
	for _, s := range first.GetServers() {
		sv := serverVersionJSON{ID: s.GetId(), GRPCAddress: s.GetGrpcAddress()}
		if r := answers[s.GetId()]; r != nil {
			sv.Answered, sv.Version, sv.Revision = true, r.GetVersion(), r.GetRevision()
		}
		list = append(list, sv)
	}
	out.Servers = &list
	if o.json {
		return writeJSON(o.stdout, out)
	}
	return writeServerVersions(o.stdout, list)
}

func writeServerVersions(w io.Writer, list []serverVersionJSON) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw)
	tw := newTable(bw)
	fmt.Fprintln(tw, "ID\tGRPC ADDRESS\tVERSION\tREVISION")
	for _, s := range list {
		v, rev := "-", "-"
		if s.Answered {
			v, rev = serverVersion(s.Version), orDash(s.Revision)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, orDash(s.GRPCAddress), v, rev)
	}
	tw.Flush()
	return bw.Flush()
}

// serverVersion is what a table shows for a server's version: a server
// older than the Status field reports none.
func serverVersion(v string) string {
	if v == "" {
		return "(unknown)"
	}
	return v
}
