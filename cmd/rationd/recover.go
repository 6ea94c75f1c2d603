package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/faults"
)

// "rationd recover" rewrites a stopped server's Raft configuration when
// the cluster has lost its quorum for good (coordinator.Recover;
// docs/operations.md, "Recovering from a lost quorum").

type recoverOptions struct {
	id, dataDir, peers string
	faults             stringList // test builds only
}

func recoverFlags(o *recoverOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("rationd recover", flag.ContinueOnError)
	fs.StringVar(&o.id, "id", o.id, "this server's `ID` (its --id); it must be a voter in --peers; required")
	fs.StringVar(&o.dataDir, "data-dir", o.dataDir, "this server's `DIR` (its --data-dir); the server must be stopped; required")
	fs.StringVar(&o.peers, "peers", o.peers, "JSON `FILE` of the servers the recovered cluster starts with: [{\"id\": ..., \"address\": RAFT-HOST:PORT, \"non_voter\": false}]; required")
	if faults.Enabled {
		fs.Var(&o.faults, "fault", fmt.Sprintf("TEST BUILD ONLY: turn on a broken `VARIANT` (repeatable): %v", faults.All))
	}
	return withEnvUsage(fs)
}

func recoverUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rationd recover --id ID --data-dir DIR --peers FILE

For a cluster whose majority is gone for good (disks lost): rewrites the
Raft configuration of this stopped server to the servers of --peers,
keeping every entry on its disk, like Consul's peers.json. The recovered
cluster holds every budget for the longest lease duration (plus 1 s) once
it elects a leader, as after a snapshot restore: the lost servers may
have granted leases this disk never saw. Run it on one survivor, the one
with the highest last index, with --peers naming it alone; start it, then
join new servers to it (docs/operations.md, "Recovering from a lost
quorum"). Do not run it while a quorum lives.

The peers file:

  [{"id": "node3", "address": "10.0.0.3:7410", "non_voter": false}]

address is the server's Raft address (--advertise-raft-addr, else
--raft-addr).

Flags:
`)
	var o recoverOptions
	fs := recoverFlags(&o)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// peerEntry is one server of a peers file.
type peerEntry struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	NonVoter bool   `json:"non_voter"`
}

// readPeers reads and checks a peers file; self must be a voter in it.
func readPeers(path, self string) ([]raft.Server, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--peers: %w", err)
	}
	var entries []peerEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("--peers %s: %w (want [{\"id\": ..., \"address\": HOST:PORT, \"non_voter\": false}])", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("--peers %s: no servers", path)
	}
	seen := map[string]bool{}
	var servers []raft.Server
	selfVoter := false
	for i, e := range entries {
		switch {
		case e.ID == "":
			return nil, fmt.Errorf("--peers %s: server %d has no id", path, i+1)
		case seen[e.ID]:
			return nil, fmt.Errorf("--peers %s: server %q is listed twice", path, e.ID)
		}
		if _, _, err := net.SplitHostPort(e.Address); err != nil {
			return nil, fmt.Errorf("--peers %s: server %q: address %q is not HOST:PORT", path, e.ID, e.Address)
		}
		seen[e.ID] = true
		suffrage := raft.Voter
		if e.NonVoter {
			suffrage = raft.Nonvoter
		} else if e.ID == self {
			selfVoter = true
		}
		servers = append(servers, raft.Server{ID: raft.ServerID(e.ID), Address: raft.ServerAddress(e.Address), Suffrage: suffrage})
	}
	if !selfVoter {
		return nil, fmt.Errorf("--peers %s: this server, %q, is not a voter in it", path, self)
	}
	return servers, nil
}

// runRecover implements "rationd recover".
func runRecover(args []string, stdout, stderr io.Writer) int {
	var o recoverOptions
	env, err := parseArgs(recoverFlags(&o), args)
	if errors.Is(err, flag.ErrHelp) {
		recoverUsage(stdout)
		return 0
	}
	if err == nil {
		switch {
		case o.id == "" || o.dataDir == "" || o.peers == "":
			err = usageErrorf("--id, --data-dir and --peers are required")
		}
	}
	var servers []raft.Server
	if err == nil {
		if servers, err = readPeers(o.peers, o.id); err != nil {
			err = usageErrorf("%v", err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd recover: %v\n\n", env.explain(err))
		recoverUsage(stderr)
		return 2
	}
	if len(o.faults) > 0 {
		if err := faults.Set(o.faults...); err != nil {
			fmt.Fprintf(stderr, "rationd recover: --fault: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "rationd recover: TEST BUILD: running with broken variants %s\n", o.faults.String())
	}
	res, err := coordinator.Recover(o.dataDir, o.id, servers, nil)
	if errors.Is(err, coordinator.ErrNoRaftStore) {
		err = fmt.Errorf("%w (is --data-dir the server's data dir?)", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd recover: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "rationd recover: %s recovered: last entry %d (term %d), cluster time %v, %d policies.\n",
		o.id, res.LastIndex, res.LastTerm, time.Duration(res.ClusterTime), res.Policies)
	fmt.Fprintf(stdout, "The new configuration:\n")
	for _, s := range servers {
		fmt.Fprintf(stdout, "  %s at %s (%s)\n", s.ID, s.Address, s.Suffrage)
	}
	fmt.Fprintf(stdout, `Start the server(s) of the new configuration as before; once they elect a
leader, every budget is held (grants get nothing) for the longest lease
duration plus 1 s. Then join new servers to replace the lost ones, each
with an empty data dir and --join (docs/operations.md).
`)
	return 0
}
