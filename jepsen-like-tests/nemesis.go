//go:build jepsen && linux

package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ration-dev/ration/api"
)

// Nemesis is one fault: Run applies it, holds it, and heals it. The
// runner records its interval on the timeline and then waits for the
// cluster to settle before the next one.
type Nemesis struct {
	Name string
	Run  func(e *Env, rng *rand.Rand) string // returns a detail for the timeline
}

// faultHold is how long a timed fault stays in force; pauses and cuts of a
// client last longer than its lease instead.
const faultHold = 4 * time.Second

func (e *Env) followers() []string {
	l := e.currentLeader()
	var out []string
	for _, s := range e.cfg.Servers {
		if s != l {
			out = append(out, s)
		}
	}
	return out
}

// mustLeader waits for a leader (the previous fault may still be settling).
func (e *Env) mustLeader() string {
	var l string
	e.waitFor(30*time.Second, "a leader", func() error {
		if l = e.currentLeader(); l == "" {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return l
}

func shuffled(rng *rand.Rand, xs []string) []string {
	out := slices.Clone(xs)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (e *Env) block(pairs [][2]string) {
	if err := e.net.Block(pairs); err != nil {
		e.t.Fatal(err)
	}
}

func (e *Env) heal() {
	if err := e.net.HealAll(); err != nil {
		e.t.Fatal(err)
	}
}

// The nemeses of the suite. Each runs alone in the quick run; Mix runs
// several at once.
var (
	KillLeader = Nemesis{"kill-leader", func(e *Env, _ *rand.Rand) string {
		l := e.mustLeader()
		e.kill(l)
		hold(2 * time.Second)
		e.restart(l)
		return "kill -9 " + l + ", restarted after 2s"
	}}
	KillFollower = Nemesis{"kill-follower", func(e *Env, rng *rand.Rand) string {
		e.mustLeader()
		f := shuffled(rng, e.followers())[0]
		e.kill(f)
		hold(faultHold)
		e.restart(f)
		return "kill -9 " + f + ", restarted after 4s"
	}}
	KillAll = Nemesis{"kill-all", func(e *Env, _ *rand.Rand) string {
		e.mustLeader()
		e.mu.Lock()
		restoredAt := e.restoredAt
		e.mu.Unlock()
		e.grantCheck = &grantCheck{killedAt: MonoNow(), restoredAt: restoredAt}
		for _, s := range e.cfg.Servers {
			e.kill(s)
		}
		hold(time.Second)
		for _, s := range e.cfg.Servers {
			e.restart(s)
		}
		e.grantCheck.snapshot(e)
		return "kill -9 every server, restarted after 1s"
	}}
	PauseLeader = Nemesis{"pause-leader", func(e *Env, _ *rand.Rand) string {
		l := e.mustLeader()
		e.signal(l, syscall.SIGSTOP)
		hold(3 * time.Second) // > the 1s election timeout
		e.signal(l, syscall.SIGCONT)
		return "SIGSTOP " + l + " for 3s"
	}}
	PauseClient = Nemesis{"pause-client", func(e *Env, rng *rand.Rand) string {
		return e.pauseClient(shuffled(rng, e.cfg.clients())[0])
	}}
	PartitionLeader = Nemesis{"partition-leader", func(e *Env, _ *rand.Rand) string {
		l := e.mustLeader()
		e.block(Isolate(l, e.cfg.Servers))
		hold(faultHold)
		e.heal()
		return l + " cut from the other servers (clients reach all)"
	}}
	PartitionMajority = Nemesis{"partition-majority-minority", func(e *Env, rng *rand.Rand) string {
		s := shuffled(rng, e.cfg.Servers)
		c := shuffled(rng, e.cfg.clients())
		minority := []string{s[0], c[0]}
		majority := append(slices.Clone(s[1:]), c[1:]...)
		e.block(Split(minority, majority))
		hold(faultHold)
		e.heal()
		return fmt.Sprintf("%v | %v", minority, majority)
	}}
	PartitionBridge = Nemesis{"partition-bridge", func(e *Env, rng *rand.Rand) string {
		p := Bridge(shuffled(rng, e.cfg.Servers))
		e.block(p)
		hold(faultHold)
		e.heal()
		return fmt.Sprintf("cut %v", p)
	}}
	PartitionRing = Nemesis{"partition-majorities-ring", func(e *Env, rng *rand.Rand) string {
		p := MajoritiesRing(shuffled(rng, e.cfg.Servers))
		e.block(p)
		hold(faultHold)
		e.heal()
		return fmt.Sprintf("cut %v", p)
	}}
	CutClient = Nemesis{"client-cut", func(e *Env, rng *rand.Rand) string {
		return e.cutClient(shuffled(rng, e.cfg.clients())[0])
	}}
	// PauseEdge and CutEdge are pause-client and client-cut on the first
	// edge, so that a run with one does both to it whatever the seed
	// draws. Its driver keeps calling: a stopped edge answers nothing (each
	// call a refusal after its deadline), a cut one answers from its lease
	// until the lease's deadline, then refuses (fail-closed).
	PauseEdge = Nemesis{"pause-edge", func(e *Env, _ *rand.Rand) string {
		if len(e.cfg.Edges) == 0 {
			return "no edge in this run"
		}
		return e.pauseClient(e.cfg.Edges[0])
	}}
	CutEdge = Nemesis{"edge-cut", func(e *Env, _ *rand.Rand) string {
		if len(e.cfg.Edges) == 0 {
			return "no edge in this run"
		}
		return e.cutClient(e.cfg.Edges[0])
	}}
	ClockWithinRho = Nemesis{"clock-rate-within-rho", func(e *Env, _ *rand.Rand) string {
		// ρ is 1000 ppm (the policy default): every process runs 900 ppm
		// fast or slow, alternately. Not the edges: rationd edge has no
		// --clock-control (it reads the host's clock).
		all := append(slices.Clone(e.cfg.Servers), e.cfg.Replicas...)
		for i, p := range all {
			e.setClock(p, int64(900*(1-2*(i%2))), 0)
		}
		hold(6 * time.Second)
		for _, p := range all {
			e.setClock(p, 0, 0)
		}
		return "±900 ppm on every server and replica (ρ = 1000 ppm)"
	}}
	WallClockJumps = Nemesis{"wall-clock-jumps", func(e *Env, _ *rand.Rand) string {
		// Not the edges (no clock control; see clock-rate-within-rho).
		all := append(slices.Clone(e.cfg.Servers), e.cfg.Replicas...)
		for i, p := range all {
			e.setClock(p, 0, int64(5*time.Minute)*int64(1-2*(i%2)))
		}
		hold(faultHold)
		for _, p := range all {
			e.setClock(p, 0, 0)
		}
		return "wall clocks jump ±5 minutes on every process"
	}}
	Membership = Nemesis{"membership", func(e *Env, _ *rand.Rand) string {
		e.mustLeader()
		e.startServer("n4", 0)
		e.waitFor(60*time.Second, "n4 to become a voter", func() error { return e.hasVoter("n4", true) })
		l := e.mustLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if l == "n4" {
			if _, err := e.admin(l).LeaderTransfer(ctx, &api.LeaderTransferRequest{}); err != nil {
				e.t.Logf("leader transfer away from n4: %v", err)
			}
			l = e.mustLeader()
		}
		e.kill("n4")
		if _, err := e.admin(l).RemoveServer(ctx, &api.RemoveServerRequest{Id: "n4"}); err != nil {
			e.t.Logf("remove n4: %v (retrying through the condition wait)", err)
		}
		e.waitFor(60*time.Second, "n4 to leave the configuration", func() error {
			if err := e.hasVoter("n4", false); err != nil {
				if l := e.currentLeader(); l != "" && l != "n4" {
					c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					e.admin(l).RemoveServer(c, &api.RemoveServerRequest{Id: "n4"})
				}
				return err
			}
			return nil
		})
		e.mu.Lock()
		if c := e.conns["n4"]; c != nil {
			c.Close()
			delete(e.conns, "n4")
		}
		e.mu.Unlock()
		return "added n4 as a voter, then killed and removed it"
	}}
	DegradedNetwork = Nemesis{"degraded-network", func(e *Env, _ *rand.Rand) string {
		all := append(slices.Clone(e.cfg.Servers), e.cfg.clients()...)
		for _, h := range all {
			if err := e.net.Loss(h, 15); err != nil {
				e.t.Fatal(err)
			}
		}
		hold(6 * time.Second)
		e.heal()
		return "15% inbound packet loss on every host (iptables statistic; this kernel has no netem)"
	}}
)

// pauseClient stops replica or edge c (SIGSTOP) for longer than its lease.
func (e *Env) pauseClient(c string) string {
	d := e.cfg.Policy.Lease + time.Second
	e.signal(c, syscall.SIGSTOP)
	hold(d)
	e.signal(c, syscall.SIGCONT)
	return fmt.Sprintf("SIGSTOP %s for %v (longer than its lease)", c, d)
}

// cutClient cuts replica or edge c from every server for longer than its
// lease (an edge's driver, on the edge's host, still reaches it).
func (e *Env) cutClient(c string) string {
	d := e.cfg.Policy.Lease + 2*time.Second
	e.block(ClientCut(c, e.cfg.Servers))
	hold(d)
	e.heal()
	return fmt.Sprintf("%s cut from every server for %v", c, d)
}

// Mix runs several nemeses at once, each on its own goroutine, chosen by
// the seed from those that can overlap safely.
func Mix(k int) Nemesis {
	return Nemesis{fmt.Sprintf("mix-%d", k), func(e *Env, rng *rand.Rand) string {
		pool := []Nemesis{KillFollower, PauseClient, ClockWithinRho, PartitionLeader, CutClient}
		picked := shuffled(rng, []string{"0", "1", "2", "3", "4"})[:k]
		var names []string
		done := make(chan string, k)
		for _, p := range picked {
			n := pool[p[0]-'0']
			names = append(names, n.Name)
			sub := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			go func() { done <- n.Name + ": " + n.Run(e, sub) }()
		}
		var details []string
		for range picked {
			details = append(details, <-done)
		}
		return strings.Join(details, "; ")
	}}
}

// hasVoter reports (as nil) whether id's voter status matches want, as the
// leader's status shows it.
func (e *Env) hasVoter(id string, want bool) error {
	l := e.currentLeader()
	if l == "" {
		return fmt.Errorf("no leader")
	}
	st, err := e.status(l)
	if err != nil {
		return err
	}
	has := false
	for _, s := range st.GetServers() {
		if s.GetId() == id && s.GetSuffrage() == "voter" {
			has = true
		}
	}
	if has != want {
		return fmt.Errorf("%s voter = %v, want %v", id, has, want)
	}
	return nil
}

// runNemesis records the fault's interval and then waits for the cluster
// to settle: a leader, and every replica admitting again.
func (e *Env) runNemesis(n Nemesis, rng *rand.Rand) {
	e.t.Logf("nemesis %s", n.Name)
	_ = e.tl.Emit(KindNemesisStart, n.Name, "")
	detail := n.Run(e, rng)
	_ = e.tl.Emit(KindNemesisEnd, n.Name, detail)
	e.settle()
}

// settle waits until there is a leader and every replica's history grew.
// A calendar window's day may be spent, so nobody admits until it ends:
// there a replica has settled once it admits or a grant reaches it (its
// grants file grew: a renewal of a chunk, even of 0 units, says the
// replica reaches a leader).
func (e *Env) settle() {
	sizes, grants := e.fileSizes("history"), e.fileSizes("grants")
	calendar := e.cfg.Policy.Period != ""
	e.waitFor(60*time.Second, "the cluster to settle (a leader, every replica admitting)", func() error {
		if e.currentLeader() == "" {
			return fmt.Errorf("no leader")
		}
		now, nowGrants := e.fileSizes("history"), e.fileSizes("grants")
		for _, r := range e.cfg.clients() {
			if calendar && nowGrants[r] > grants[r] {
				continue
			}
			if now[r] <= sizes[r] {
				return fmt.Errorf("replica %s has admitted nothing since the fault ended", r)
			}
		}
		return nil
	})
}

// fileSizes is the size of each client's <kind>-<client>.csv.
func (e *Env) fileSizes(kind string) map[string]int64 {
	out := map[string]int64{}
	for _, r := range e.cfg.clients() {
		if st, err := os.Stat(fmt.Sprintf("%s/%s-%s.csv", e.dir, kind, r)); err == nil {
			out[r] = st.Size()
		}
	}
	return out
}

// PartitionLeaderWithClients cuts the leader and two replicas off from the
// other servers and replicas: those replicas can reach only the old leader.
var PartitionLeaderWithClients = Nemesis{"partition-leader-with-clients", func(e *Env, _ *rand.Rand) string {
	l := e.mustLeader()
	var others []string
	for _, s := range e.cfg.Servers {
		if s != l {
			others = append(others, s)
		}
	}
	minority := []string{l, e.cfg.Replicas[0], e.cfg.Replicas[1]}
	majority := append(others, e.cfg.Replicas[2:]...)
	e.block(Split(minority, majority))
	hold(e.cfg.Policy.Lease + 2*time.Second)
	e.heal()
	return fmt.Sprintf("%v | %v", minority, majority)
}}

// RestartReplicas stops every replica and edge gracefully (a replica
// flushes its history; both release their leases) and starts it again as a
// new incarnation, one after another, twice: eight new leases within a
// couple of seconds. An edge's driver keeps running: its calls are refused
// while the edge is down.
var RestartReplicas = Nemesis{"restart-replicas", func(e *Env, _ *rand.Rand) string {
	for range 2 {
		for _, r := range e.cfg.clients() {
			if err := e.stop(r); err != nil {
				e.t.Errorf("stopping %s: %v", r, err)
			}
			e.restart(r)
			hold(500 * time.Millisecond) // let the new incarnation spend
		}
	}
	return "each replica and edge stopped (SIGTERM) and restarted as a new incarnation, twice, 0.5s apart"
}}

// PartitionFirstServerLeader makes the first server (the one every replica
// sends to first) the leader, then cuts it off from the other servers while
// the replicas still reach it: their requests keep arriving at a leader
// that cannot commit until it steps down.
var PartitionFirstServerLeader = Nemesis{"partition-leader-clients-talk-to", func(e *Env, _ *rand.Rand) string {
	first := e.cfg.Servers[0]
	e.waitFor(60*time.Second, first+" to lead", func() error {
		l := e.currentLeader()
		if l == first {
			return nil
		}
		if l != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.admin(l).LeaderTransfer(ctx, &api.LeaderTransferRequest{Id: first})
		}
		return fmt.Errorf("leader is %q", l)
	})
	e.block(Isolate(first, e.cfg.Servers))
	hold(faultHold)
	e.heal()
	return first + " (leader, first in every replica's server list) cut from the other servers"
}}

// transferLeader moves leadership to `to` and waits until it leads,
// asking again while another server leads (a transfer can fail under
// load, or an election can intervene).
func (e *Env) transferLeader(to string) {
	e.waitFor(60*time.Second, to+" to lead", func() error {
		l := e.currentLeader()
		if l == to {
			return nil
		}
		if l != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.admin(l).LeaderTransfer(ctx, &api.LeaderTransferRequest{Id: to})
		}
		return fmt.Errorf("leader is %q", l)
	})
}

// IdleTransferReturn is the committed-cluster-time term start (docs/design.md §3.3) under load. Every replica
// stops (SIGSTOP), so nothing commits but the expiries of their leases,
// while leader A's clock reads on (its expire loop) until it is more than
// D + 4s past the committed cluster time. Leadership moves to B, which
// continues from the committed time; the replicas resume (spread over one
// renew interval) and B grants them leases, until every one holds a share
// and they hold 90% of r between them (shares converge within a few early
// renewals); leadership
// moves straight back to A, under full load, with one replica (chosen by
// the seed) cut off from every server from just before the transfer back
// until D + 1s after it. A's clock must continue from the committed cluster
// time, not from its own last reading: resuming from that, it finds every
// lease B granted expired and reclaims them at once, and the replicas that
// renew are refused and acquire the whole of r and B between them, while
// the cut replica, which cannot hear of the reclaim, admits at its share
// until its lease's deadline, seconds later (the clock-resume-own-reading
// control; about 200 tokens/s over r for 3-4s). Without the cut the
// excess would last only until the replicas' next renewals, and replicas
// whose shares converged together renew in step, within a few tens of
// milliseconds: the reclaim then shows as a short outage, not an excess.
// With the correct clock the cut replica's lease stays held in A's ledger
// until its expiry, as for any client cut off (the client-cut nemesis).
var IdleTransferReturn = Nemesis{"idle-transfer-grant-return", func(e *Env, rng *rand.Rand) string {
	a := e.mustLeader()
	for _, r := range e.cfg.clients() {
		e.signal(r, syscall.SIGSTOP)
	}
	// The spell's excess over D is the time B has to grant the replicas
	// their shares before A's old reading is no longer past their expiry
	// (renewals on B push it on); it must stay under the leader's 10s
	// housekeeping expire, which commits and restarts the spell.
	spell := e.cfg.Policy.Lease + 4*time.Second
	var readA, committed int64
	// Leases expire (one D), then the spell; a housekeeping expire (every
	// 10s) restarts the spell, so allow for two.
	e.waitFor(2*spell+30*time.Second, fmt.Sprintf("%s's clock to read %v past the committed cluster time", a, spell), func() error {
		if l := e.currentLeader(); l != "" && l != a {
			a = l // an election: idle on the new leader instead
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		list, err := e.admin(a).ListLeases(ctx, &api.ListLeasesRequest{Policy: "jepsen"})
		if err != nil {
			return err
		}
		// Status after ListLeases: the gap is never overstated.
		st, err := e.status(a)
		if err != nil {
			return err
		}
		if st.GetLeader() != a {
			return fmt.Errorf("%s does not lead", a)
		}
		readA, committed = list.GetClusterTimeNanos(), st.GetClusterTimeNanos()
		if gap := time.Duration(readA - committed); gap <= spell || len(list.GetLeases()) > 0 {
			return fmt.Errorf("%s's clock %v past the committed time, %d leases", a, gap, len(list.GetLeases()))
		}
		return nil
	})
	gap := time.Duration(readA - committed)
	b := shuffled(rng, e.followers())[0]
	e.transferLeader(b)
	// Resumed one by one, a fraction of the renew interval apart, so their
	// renewals do not all fall in the same instant.
	for i, r := range e.cfg.clients() {
		if i > 0 {
			hold(e.cfg.Policy.RenewAfter / time.Duration(len(e.cfg.clients())))
		}
		e.signal(r, syscall.SIGCONT)
	}
	var lastExpiry, held int64
	e.waitFor(30*time.Second, "every replica to hold a share from "+b+", 90% of r between them", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		list, err := e.admin(b).ListLeases(ctx, &api.ListLeasesRequest{Policy: "jepsen"})
		if err != nil {
			return err
		}
		sharing := map[string]bool{}
		lastExpiry, held = 0, 0
		for _, l := range list.GetLeases() {
			if l.GetRateMilliPerSec() > 0 {
				sharing[l.GetClientId()] = true
			}
			lastExpiry = max(lastExpiry, l.GetExpiresNanos())
			held += l.GetRateMilliPerSec()
		}
		// Every replica admitting at its share, 90% of r between them: the
		// windows are full, so a reclaim that lets new leases mint beside
		// the old ones shows as an excess (a lone replica holding all of r
		// while the others wait offers less than r, and the slack hides it).
		if len(sharing) < len(e.cfg.clients()) || 10*held < 9*e.cfg.Policy.Rate*1000 {
			return fmt.Errorf("%d replicas hold a share, %d milli-tokens/s between them", len(sharing), held)
		}
		return nil
	})
	cut := shuffled(rng, e.cfg.clients())[0]
	e.block(ClientCut(cut, e.cfg.Servers))
	cutAt := MonoNow()
	e.transferLeader(a)
	backAt := MonoNow()
	// Full load on A for longer than a lease before anything else happens
	// (the next nemesis may stop every replica at once): every replica but
	// the cut one renews with A, and the cut one runs out its lease, so
	// whatever A does with B's leases shows in the history.
	hold(e.cfg.Policy.Lease + time.Second)
	e.heal()
	shows := "ahead of"
	if readA <= lastExpiry {
		shows = "NOT ahead of (the old bug would not show)"
	}
	return fmt.Sprintf("replicas stopped; %s idle until its clock read %.1fs past the committed time; leader → %s, replicas resumed and granted %d tokens/s; %s cut from every server, leader back to %s %.2fs later (its last reading %.1fs %s their leases' expiry); cut healed after %v",
		a, gap.Seconds(), b, held/1000, cut, a, time.Duration(backAt-cutAt).Seconds(), time.Duration(readA-lastExpiry).Seconds(), shows, e.cfg.Policy.Lease+time.Second)
}}
