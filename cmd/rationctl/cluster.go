package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
)

var statusVerb = verb{
	name:    "status",
	summary: "show the leader, Raft indexes and every server's state and health",
	help: `Shows the Raft leader and term, the commit and applied indexes and cluster
time of the server that answered, how many policies, keys and leases the
cluster holds, the failure tolerance, and every server in the Raft
configuration with its addresses, suffrage, Raft state, gossip health, last
contact with the leader, last log index, version (as the server reports
it: a cluster half way through an upgrade shows its mix) and autopilot
health.

Every server is asked for its own figures at its advertised gRPC address,
or else at one of --servers (from here: a server rationctl cannot reach
shows no figures). Health and the failure tolerance are what the leader's
autopilot computed: a server is healthy when it is alive in the leader's
gossip, answered the leader on Raft recently enough, is in the leader's
term and its log is close enough to the leader's (rationd's
--autopilot-max-last-contact and --autopilot-max-trailing-logs); an
unhealthy one shows why. A new server is a non-voter until it has been
healthy for the leader's --server-stabilization-time. The failure
tolerance is how many voters can fail before the quorum is lost: healthy
voters minus the quorum (voters/2 + 1), 0 without a leader.

A leader older than its autopilot reports none: rationctl then judges
health itself, as Consul's autopilot would, and says so: a server is
healthy when it answers, is alive in gossip, follows the same leader in
the same term, heard from the leader within --max-last-contact and its log
is within --max-trailing-logs entries of the leader's (both flags apply to
that case only).

--json prints {"leader", "term", "commit_index", "applied_index",
"answered_by", "cluster_time_nanos", "policies", "keys", "leases",
"voters", "quorum", "healthy_voters", "failure_tolerance",
"health_source" ("leader": its autopilot; "rationctl": judged here),
"autopilot" (the leader's, when it reports one: "healthy",
"failure_tolerance", "stabilization_time_nanos", "max_last_contact_nanos",
"max_trailing_logs", "reap_timeout_nanos", "updated_unix_nanos"),
"servers": [{"id", "address" (Raft), "grpc_address", "suffrage", "state",
"healthy" (alive in gossip), "answered", "term", "last_contact_nanos" (-1:
never or unknown), "last_log_index", "version", "revision",
"autopilot_healthy", "problem", "autopilot" (the leader's view: "raft_state",
"node_status", "healthy", "reason", "last_contact_nanos" (since the leader
last heard from it; -1 never), "last_index", "last_term",
"stable_since_unix_nanos")}]}.`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.DurationVar(&o.maxLastContact, "max-last-contact", defaultMaxLastContact,
			"without the leader's autopilot state (an older leader): a server that last heard from the leader longer ago than `D` is unhealthy")
		fs.Uint64Var(&o.maxTrailingLogs, "max-trailing-logs", defaultMaxTrailingLogs,
			"without the leader's autopilot state (an older leader): a server whose log is more than `N` entries behind the leader's is unhealthy")
	},
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().Status(ctx, &api.StatusRequest{})
		if err != nil {
			return err
		}
		servers, _ := o.serverList() // resolved already by o.admin()
		h := health(r, askAll(ctx, r, servers), o.maxLastContact, o.maxTrailingLogs)
		return writeStatus(o.stdout, r, h, o.json)
	},
}

var membersVerb = verb{
	name:    "members",
	summary: "show the gossip members as the answering server sees them",
	reads:   true,
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().Members(ctx, &api.MembersRequest{})
		if err != nil {
			return err
		}
		return writeMembers(o.stdout, r, o.json)
	},
}

var leasesVerb = verb{
	name:     "leases",
	synopsis: "[--policy P] [--key K]",
	summary:  "show who holds which lease, and each key's pool",
	help: `Lists the live leases (as the leader sees them): policy, key, client and
incarnation, lease ID, the lease's rate and local cap, the tokens granted
with it, the rate and cap held (what a renewal reduced stays held until the
client's next renewal acknowledges the new terms, or the old terms expire),
and the time to expiry in cluster time. Then each key's
pool: the tokens leased to no one.

Tokens and rates are shown with 3 decimals; --json gives the exact integer
milli-units and nanoseconds of the API.`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.StringVar(&o.policy, "policy", "", "only the leases of policy `P`")
		fs.StringVar(&o.key, "key", "", "only the leases of canonical key `K` (the key attribute values joined by /)")
	},
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().ListLeases(ctx, &api.ListLeasesRequest{Policy: o.policy, Key: o.key})
		if err != nil {
			return err
		}
		return writeLeases(o.stdout, r, o.json)
	},
}

var leaderVerbs = []verb{{
	name:     "leader transfer",
	synopsis: "[--if-leader] [ID]",
	summary:  "hand leadership to server ID, or to any other voter",
	help: `Hands leadership to server ID, or to any other voter. With --if-leader it
does so only if the server that answers leads, and otherwise says so and
exits 0: a Kubernetes preStop hook runs it with --servers naming the
local server, so a pod about to stop hands leadership over while it
still serves, and a follower's stop costs no election.`,
	args: []string{"[ID]"},
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.BoolVar(&o.ifLeader, "if-leader", false,
			"only if the server that answers leads (the first of --servers that answers); otherwise do nothing")
	},
	run: func(ctx context.Context, o *invocation) error {
		if o.ifLeader {
			st, err := o.admin().Status(ctx, &api.StatusRequest{})
			if err != nil {
				return err
			}
			if st.GetLeader() != st.GetAnsweredBy() {
				_, err = fmt.Fprintf(o.stdout, "%s does not lead (leader %s): nothing to transfer\n",
					st.GetAnsweredBy(), orDash(st.GetLeader()))
				return err
			}
		}
		req := &api.LeaderTransferRequest{}
		if len(o.args) > 0 {
			req.Id = o.args[0]
		}
		r, err := o.admin().LeaderTransfer(ctx, req)
		if err != nil {
			return err
		}
		leader := r.GetNewLeader()
		if leader == "" {
			// The old leader answers as soon as it has stepped down, often
			// before it has heard from the new one: ask until one is known.
			if leader, err = awaitLeader(ctx, o.admin()); err != nil {
				return err
			}
		}
		_, err = fmt.Fprintf(o.stdout, "leadership transferred to %s\n", leader)
		return err
	},
}}

var serverVerbs = []verb{{
	name:     "server remove",
	synopsis: "ID",
	summary:  "remove server ID from the Raft configuration",
	help: `Removes server ID from the Raft configuration, e.g. a server that is gone for
good. The leader's autopilot also removes servers dead in gossip for longer
than its reap timeout (rationd --reap-timeout, default 72h) on its own.`,
	args: []string{"ID"},
	run: func(ctx context.Context, o *invocation) error {
		r, err := o.admin().RemoveServer(ctx, &api.RemoveServerRequest{Id: o.args[0]})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.stdout, "removed server %s (log index %d)\n", o.args[0], r.GetIndex())
		return err
	},
}}

// awaitLeader asks Status until the cluster names a leader, or ctx ends.
func awaitLeader(ctx context.Context, admin api.AdminClient) (string, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := admin.Status(ctx, &api.StatusRequest{})
		if err != nil {
			return "", err
		}
		if st.GetLeader() != "" {
			return st.GetLeader(), nil
		}
		select {
		case <-ctx.Done():
			return "", status.FromContextError(ctx.Err()).Err()
		case <-tick.C:
		}
	}
}
