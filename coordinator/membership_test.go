package coordinator

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

func raftAddr(id string) string { return "10.0.0." + id[1:] + ":7000" }

// member is a gossip member with decodable meta and status alive, dead or
// left.
func member(id string, status memberStatus) memberInfo {
	return memberInfo{Name: id, Address: "10.0.0." + id[1:] + ":7946", Status: status,
		Meta: serverMeta{ID: id, RaftAddr: raftAddr(id), GRPCAddr: "10.0.0." + id[1:] + ":7100", Expect: 3}, ok: true}
}

func voters(ids ...string) raft.Configuration {
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr(id))})
	}
	return c
}

func TestPlanReconcile(t *testing.T) {
	now := time.Unix(1000, 0)
	const reap = 10 * time.Second
	long := now.Add(-reap - time.Second) // dead longer than reap
	short := now.Add(-reap / 2)          // dead, but not for long enough

	moved := member("s2", "alive")
	moved.Meta.RaftAddr = "10.0.9.9:7000"
	movedSelf := member("s1", "alive")
	movedSelf.Meta.RaftAddr = "10.0.9.9:7000"
	noMeta := memberInfo{Name: "s4", Status: "alive"}
	nonvoterCfg := voters("s1", "s2", "s3") // plus s4, a nonvoter
	nonvoterCfg.Servers = append(nonvoterCfg.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: "s4", Address: raft.ServerAddress(raftAddr("s4"))})

	tests := []struct {
		name      string
		members   []memberInfo
		cfg       raft.Configuration
		deadAt    map[string]time.Time
		add       []string
		readdress []string
		remove    []string
		died      []string // reap clocks the plan starts
		revived   []string // reap clocks the plan drops
	}{
		{name: "steady", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")},
			cfg: voters("s1", "s2", "s3")},
		{name: "new member joins as a non-voter", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "alive")},
			cfg: voters("s1", "s2", "s3"), add: []string{"s4"}},
		{name: "member without meta is ignored", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), noMeta},
			cfg: voters("s1", "s2", "s3")},
		{name: "new address is rewritten", members: []memberInfo{member("s1", "alive"), moved, member("s3", "alive")},
			cfg: voters("s1", "s2", "s3"), readdress: []string{"s2"}},
		{name: "own new address is rewritten too", members: []memberInfo{movedSelf, member("s2", "alive"), member("s3", "alive")},
			cfg: voters("s1", "s2", "s3"), readdress: []string{"s1"}},
		{name: "just died: not removed, clock starts", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "dead")},
			cfg: voters("s1", "s2", "s3", "s4"), died: []string{"s4"}},
		{name: "back alive: clock dropped", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "alive")},
			cfg: voters("s1", "s2", "s3", "s4"), deadAt: map[string]time.Time{"s4": short}, revived: []string{"s4"}},
		{name: "dead shorter than reap", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "dead")},
			cfg: voters("s1", "s2", "s3", "s4"), deadAt: map[string]time.Time{"s4": short}},
		{name: "dead longer than reap, 4 voters", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "dead")},
			cfg: voters("s1", "s2", "s3", "s4"), deadAt: map[string]time.Time{"s4": long}, remove: []string{"s4"}},
		{name: "absent from gossip counts as dead", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")},
			cfg: voters("s1", "s2", "s3", "s4"), deadAt: map[string]time.Time{"s4": long}, remove: []string{"s4"}},
		{name: "absent from gossip: clock starts", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")},
			cfg: voters("s1", "s2", "s3", "s4"), died: []string{"s4"}},
		// 3 voters, one dead: the two alive are a quorum of the 2 left.
		{name: "3 voters, 1 dead: removal keeps an alive quorum", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "dead")},
			cfg: voters("s1", "s2", "s3"), deadAt: map[string]time.Time{"s3": long}, remove: []string{"s3"}},
		// 3 voters, two dead (as gossip sees it): removing either leaves 2
		// voters with 1 alive, no quorum. Never.
		{name: "3 voters, 2 dead: never lose quorum", members: []memberInfo{member("s1", "alive"), member("s2", "dead"), member("s3", "dead")},
			cfg: voters("s1", "s2", "s3"), deadAt: map[string]time.Time{"s2": long, "s3": long}},
		{name: "5 voters, 2 dead: both go", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "dead"), member("s5", "dead")},
			cfg: voters("s1", "s2", "s3", "s4", "s5"), deadAt: map[string]time.Time{"s4": long, "s5": long}, remove: []string{"s4", "s5"}},
		{name: "5 voters, 3 dead: none go", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "dead"), member("s4", "dead"), member("s5", "dead")},
			cfg: voters("s1", "s2", "s3", "s4", "s5"), deadAt: map[string]time.Time{"s3": long, "s4": long, "s5": long}},
		{name: "left: removed at once", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "left")},
			cfg: voters("s1", "s2", "s3"), remove: []string{"s3"}, died: []string{"s3"}},
		{name: "left: still never below quorum", members: []memberInfo{member("s1", "alive"), member("s2", "left"), member("s3", "left")},
			cfg: voters("s1", "s2", "s3"), died: []string{"s2", "s3"}},
		{name: "dead nonvoter goes", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")},
			cfg: nonvoterCfg, deadAt: map[string]time.Time{"s4": long}, remove: []string{"s4"}},
		{name: "self is never removed", members: []memberInfo{member("s2", "alive"), member("s3", "alive")},
			cfg: voters("s1", "s2", "s3"), deadAt: map[string]time.Time{"s1": long}},
	}
	ids := func(ss []raft.Server, want raft.ServerSuffrage) []string {
		var out []string
		for _, s := range ss {
			out = append(out, string(s.ID))
			if s.Suffrage != want {
				t.Errorf("%s planned as %v, want %v", s.ID, s.Suffrage, want)
			}
			if want := raft.ServerAddress(""); s.Address == want {
				t.Errorf("%s planned without an address", s.ID)
			}
		}
		return out
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deadAt := maps.Clone(tc.deadAt)
			if deadAt == nil {
				deadAt = map[string]time.Time{}
			}
			p := planReconcile("s1", tc.members, tc.cfg, deadAt, now, reap)
			if !maps.Equal(deadAt, tc.deadAt) {
				t.Errorf("planReconcile wrote its deadAt argument: %v, was %v", deadAt, tc.deadAt)
			}
			remove := serverIDs(p.remove)
			if got := serverIDs(p.died); !slices.Equal(got, tc.died) {
				t.Errorf("died %v, want %v", got, tc.died)
			}
			if got := serverIDs(p.revived); !slices.Equal(got, tc.revived) {
				t.Errorf("revived %v, want %v", got, tc.revived)
			}
			if got := ids(p.add, raft.Nonvoter); !slices.Equal(got, tc.add) {
				t.Errorf("add %v, want %v", got, tc.add)
			}
			if got := ids(p.readdress, raft.Voter); !slices.Equal(got, tc.readdress) {
				t.Errorf("readdress %v, want %v", got, tc.readdress)
			}
			if !slices.Equal(remove, tc.remove) {
				t.Errorf("remove %v, want %v", remove, tc.remove)
			}
		})
	}
}

// A moved non-voter keeps its suffrage: re-adding it as a voter would
// promote it before autopilot judged it stable.
func TestPlanReconcileReaddressKeepsNonvoter(t *testing.T) {
	cfg := voters("s1", "s2", "s3")
	cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: "s4", Address: raft.ServerAddress(raftAddr("s4"))})
	moved := member("s4", "alive")
	moved.Meta.RaftAddr = "10.0.9.9:7000"
	p := planReconcile("s1", []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), moved},
		cfg, map[string]time.Time{}, time.Now(), time.Minute)
	want := []raft.Server{{Suffrage: raft.Nonvoter, ID: "s4", Address: "10.0.9.9:7000"}}
	if !slices.Equal(p.readdress, want) || len(p.add) != 0 {
		t.Fatalf("readdress %v add %v, want readdress %v", p.readdress, p.add, want)
	}
}

func TestPlanReconcileAddsAtGossipAddress(t *testing.T) {
	moved := member("s2", "alive")
	moved.Meta.RaftAddr = "10.0.9.9:7000"
	p := planReconcile("s1", []memberInfo{member("s1", "alive"), moved, member("s3", "alive"), member("s4", "alive")},
		voters("s1", "s2", "s3"), map[string]time.Time{}, time.Now(), time.Minute)
	if len(p.readdress) != 1 || p.readdress[0].Address != "10.0.9.9:7000" {
		t.Errorf("readdress %v, want s2 at 10.0.9.9:7000", p.readdress)
	}
	if len(p.add) != 1 || p.add[0].Address != raft.ServerAddress(raftAddr("s4")) {
		t.Errorf("add %v, want s4 at %s", p.add, raftAddr("s4"))
	}
}

func serverIDs(ids []raft.ServerID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, string(id))
	}
	return out
}

// The reap clock starts at the first reconcile that misses a server and
// is reset when it is seen alive again; the plan decides it, applyDeaths
// applies it, as Server.reconcile does.
func TestPlanReconcileDeadClock(t *testing.T) {
	const reap = 10 * time.Second
	t0 := time.Unix(1000, 0)
	cfg := voters("s1", "s2", "s3", "s4")
	alive := []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")}
	deadAt := map[string]time.Time{}
	reconcile := func(members []memberInfo, now time.Time) reconcilePlan {
		p := planReconcile("s1", members, cfg, deadAt, now, reap)
		p.applyDeaths(deadAt, now)
		return p
	}

	if p := reconcile(alive, t0); len(p.remove) != 0 {
		t.Fatalf("removed %v at first sight of death", p.remove)
	}
	if got := deadAt["s4"]; !got.Equal(t0) {
		t.Fatalf("deadAt[s4] = %v, want %v", got, t0)
	}
	if p := reconcile(alive, t0.Add(reap-time.Millisecond)); len(p.remove) != 0 {
		t.Fatalf("removed %v before the reap timeout", p.remove)
	}
	if got := deadAt["s4"]; !got.Equal(t0) {
		t.Fatalf("deadAt[s4] = %v after a second reconcile, want %v still", got, t0)
	}
	back := append(slices.Clone(alive), member("s4", "alive"))
	reconcile(back, t0.Add(reap-time.Millisecond))
	if _, ok := deadAt["s4"]; ok {
		t.Fatal("deadAt[s4] kept after s4 came back")
	}
	// Dies again: a fresh clock, not the old one.
	t1 := t0.Add(2 * reap)
	if p := reconcile(alive, t1); len(p.remove) != 0 {
		t.Fatalf("removed %v using the clock of an earlier death", p.remove)
	}
	if p := reconcile(alive, t1.Add(reap)); !slices.Equal(p.remove, []raft.ServerID{"s4"}) {
		t.Fatalf("remove %v after the reap timeout, want [s4]", p.remove)
	}
}

// planReconcile is a function of its arguments: the same inputs give the
// same plan however often it is asked, and the reap clocks it is given
// are left as they were.
func TestPlanReconcilePure(t *testing.T) {
	const reap = 10 * time.Second
	now := time.Unix(1000, 0)
	members := []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "dead"), member("s5", "alive"), member("s6", "left"), member("s7", "alive")}
	cfg := voters("s1", "s2", "s3", "s4", "s6", "s7")
	deadAt := map[string]time.Time{"s2": now.Add(-time.Second), "s4": now.Add(-2 * reap)}
	before := maps.Clone(deadAt)
	membersBefore := slices.Clone(members)
	first := planReconcile("s1", members, cfg, deadAt, now, reap)
	for range 3 {
		if again := planReconcile("s1", members, cfg, deadAt, now, reap); fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("a second plan from the same inputs differs:\n%+v\n%+v", again, first)
		}
	}
	if !maps.Equal(deadAt, before) {
		t.Fatalf("deadAt changed by planning: %v, was %v", deadAt, before)
	}
	if !slices.EqualFunc(members, membersBefore, func(a, b memberInfo) bool { return a == b }) {
		t.Fatal("members changed by planning")
	}
	want := reconcilePlan{
		add:     []raft.Server{{Suffrage: raft.Nonvoter, ID: "s5", Address: raft.ServerAddress(raftAddr("s5"))}},
		remove:  []raft.ServerID{"s4", "s6"},
		died:    []raft.ServerID{"s3", "s6"},
		revived: []raft.ServerID{"s2"},
	}
	if fmt.Sprint(first) != fmt.Sprint(want) {
		t.Fatalf("plan %+v, want %+v", first, want)
	}
	first.applyDeaths(deadAt, now)
	wantDead := map[string]time.Time{"s3": now, "s4": before["s4"], "s6": now}
	if !maps.Equal(deadAt, wantDead) {
		t.Fatalf("deadAt after applyDeaths %v, want %v", deadAt, wantDead)
	}
}

func TestBootstrapConfig(t *testing.T) {
	withState := member("s2", "alive")
	withState.Meta.HasState = true
	otherExpect := member("s3", "alive")
	otherExpect.Meta.Expect = 5
	noMeta := memberInfo{Name: "s9", Status: "alive"}

	tests := []struct {
		name    string
		members []memberInfo
		want    []string // nil: do not bootstrap
	}{
		{name: "too few", members: []memberInfo{member("s1", "alive"), member("s2", "alive")}},
		{name: "exactly expect", members: []memberInfo{member("s3", "alive"), member("s1", "alive"), member("s2", "alive")}, want: []string{"s1", "s2", "s3"}},
		{name: "a peer has state", members: []memberInfo{member("s1", "alive"), withState, member("s3", "alive")}},
		{name: "a peer expects another size", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), otherExpect}},
		{name: "dead members do not count", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "dead")}},
		{name: "members without meta do not count", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), noMeta},
			want: []string{"s1", "s2", "s3"}},
		// More than expect: which three? Refuse rather than guess.
		{name: "more than expect", members: []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive"), member("s4", "alive")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, ok := bootstrapConfig(tc.members, 3)
			if ok != (tc.want != nil) {
				t.Fatalf("bootstrap = %v, want %v (config %v)", ok, tc.want != nil, conf)
			}
			if !ok {
				return
			}
			var got []string
			for _, s := range conf.Servers {
				got = append(got, string(s.ID))
				if s.Suffrage != raft.Voter || s.Address != raft.ServerAddress(raftAddr(string(s.ID))) {
					t.Errorf("server %v, want a voter at %s", s, raftAddr(string(s.ID)))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("servers %v, want %v", got, tc.want)
			}
		})
	}
}

// Every server that bootstraps must propose the same configuration,
// whatever order gossip lists members in.
func TestBootstrapConfigIsOrderIndependent(t *testing.T) {
	ms := []memberInfo{member("s1", "alive"), member("s2", "alive"), member("s3", "alive")}
	first, _ := bootstrapConfig(ms, 3)
	for _, perm := range [][]int{{2, 1, 0}, {1, 0, 2}, {0, 2, 1}} {
		var p []memberInfo
		for _, i := range perm {
			p = append(p, ms[i])
		}
		got, _ := bootstrapConfig(p, 3)
		if fmt.Sprint(got) != fmt.Sprint(first) {
			t.Errorf("order %v: %v, want %v", perm, got, first)
		}
	}
}

// A member that announced its own departure is "left" even when the meta
// update saying Leaving has not reached this server (gossip does not order
// the two); one declared dead by others is "dead".
func TestObserveLeftWithoutLeavingMeta(t *testing.T) {
	m := &membership{view: map[string]viewEntry{}}
	meta, err := json.Marshal(serverMeta{ID: "s1", RaftAddr: raftAddr("s1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		state memberlist.NodeStateType
		want  memberStatus
	}{{memberlist.StateLeft, statusLeft}, {memberlist.StateDead, statusDead}} {
		m.observe(&memberlist.Node{Name: "s1", Meta: meta, State: c.state}, true)
		if got := m.members()[0].Status; got != c.want {
			t.Errorf("gone in state %v without Leaving meta: %q, want %q", c.state, got, c.want)
		}
	}
}
