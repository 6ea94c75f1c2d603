package coordinator

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestServersSupport(t *testing.T) {
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "s0", Suffrage: raft.Voter}, {ID: "s1", Suffrage: raft.Voter}, {ID: "s2", Suffrage: raft.Voter}, {ID: "n", Suffrage: raft.Nonvoter},
	}}
	member := func(id string, features uint64, status memberStatus) memberInfo {
		return memberInfo{Name: id, Status: status, ok: true, Meta: serverMeta{ID: id, Features: features}}
	}
	for _, c := range []struct {
		name    string
		members []memberInfo
		want    uint64
	}{
		{"all support", []memberInfo{member("s0", 1, "alive"), member("s1", 3, "alive"), member("s2", 1, "alive"), member("n", 1, "alive")}, 1},
		{"one predates the switch", []memberInfo{member("s1", 1, "alive"), member("s2", 0, "alive")}, 0},
		{"a voter missing from gossip", []memberInfo{member("s1", 1, "alive")}, 0},
		{"a voter dead in gossip", []memberInfo{member("s1", 1, "alive"), member("s2", 1, "dead")}, 0},
		{"undecodable metadata", []memberInfo{member("s1", 1, "alive"), {Name: "s2", Status: "alive"}}, 0},
		// A new server is a non-voter until autopilot promotes it; it
		// applies the log all the same.
		{"a nonvoter predates the switch", []memberInfo{member("s1", 1, "alive"), member("s2", 1, "alive"), member("n", 0, "alive")}, 0},
		{"a nonvoter missing from gossip", []memberInfo{member("s1", 1, "alive"), member("s2", 1, "alive")}, 0},
		{"a nonvoter supports it", []memberInfo{member("s1", 1, "alive"), member("s2", 1, "alive"), member("n", 1, "alive")}, 1},
	} {
		if got := serversSupport("s0", cfg, c.members); got&1 != c.want {
			t.Errorf("%s: support %#x, want %#x", c.name, got, c.want)
		}
	}
}
