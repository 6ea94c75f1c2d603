//go:build jepsen && linux

package jepsen

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var (
	three = []string{"n1", "n2", "n3"}
	five  = []string{"n1", "n2", "n3", "n4", "n5"}
)

// views returns, for each node, the sorted set of nodes it reaches directly (itself included)
// when pairs are cut.
func views(all []string, pairs [][2]string) map[string][]string {
	cut := map[[2]string]bool{}
	for _, p := range pairs {
		cut[p] = true
		cut[[2]string{p[1], p[0]}] = true
	}
	v := map[string][]string{}
	for _, a := range all {
		for _, b := range all {
			if a == b || !cut[[2]string{a, b}] {
				v[a] = append(v[a], b)
			}
		}
		slices.Sort(v[a])
	}
	return v
}

// checkWellFormed checks the common contract: normalised, sorted, no duplicates or self-pairs,
// only known nodes.
func checkWellFormed(t *testing.T, all []string, pairs [][2]string) {
	t.Helper()
	for i, p := range pairs {
		if p[0] >= p[1] {
			t.Errorf("pair %v not normalised a<b", p)
		}
		if !slices.Contains(all, p[0]) || !slices.Contains(all, p[1]) {
			t.Errorf("pair %v names an unknown node", p)
		}
		if i > 0 {
			q := pairs[i-1]
			if q[0] > p[0] || (q[0] == p[0] && q[1] >= p[1]) {
				t.Errorf("pairs not sorted or duplicated at %v, %v", q, p)
			}
		}
	}
}

func TestTopologyIsolate(t *testing.T) {
	for _, all := range [][]string{three, five} {
		node := all[1]
		pairs := Isolate(node, all)
		checkWellFormed(t, all, pairs)
		v := views(all, pairs)
		if !reflect.DeepEqual(v[node], []string{node}) {
			t.Errorf("%d nodes: isolated %s sees %v", len(all), node, v[node])
		}
		for _, other := range all {
			if other != node && len(v[other]) != len(all)-1 {
				t.Errorf("%d nodes: %s sees %v, want all but %s", len(all), other, v[other], node)
			}
		}
	}
	if got := Isolate("n1", []string{"n1"}); got != nil {
		t.Errorf("Isolate alone: %v", got)
	}
}

func TestTopologySplit(t *testing.T) {
	groups := [][]string{{"n4", "n1"}, {"n2", "n5", "n3"}}
	pairs := Split(groups...)
	checkWellFormed(t, five, pairs)
	v := views(five, pairs)
	for _, g := range groups {
		want := slices.Sorted(slices.Values(g))
		for _, n := range g {
			if !reflect.DeepEqual(v[n], want) {
				t.Errorf("%s sees %v, want its group %v", n, v[n], want)
			}
		}
	}
	if len(pairs) != 6 {
		t.Errorf("2x3 split: %d pairs, want 6: %v", len(pairs), pairs)
	}

	// Three groups of three nodes' worth: {n1} {n2} {n3} cuts everything.
	if got, want := Split([]string{"n1"}, []string{"n2"}, []string{"n3"}), [][2]string{{"n1", "n2"}, {"n1", "n3"}, {"n2", "n3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("singleton groups: %v, want %v", got, want)
	}
	// A node in two groups bridges them rather than being cut from a group-mate.
	got := Split([]string{"n1", "n2"}, []string{"n2", "n3"})
	if want := [][2]string{{"n1", "n3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("overlapping groups: %v, want %v", got, want)
	}
}

func TestTopologyBridge(t *testing.T) {
	for _, tc := range []struct {
		all    []string
		bridge string
		want   [][2]string
	}{
		{three, "n2", [][2]string{{"n1", "n3"}}},
		{five, "n3", [][2]string{{"n1", "n4"}, {"n1", "n5"}, {"n2", "n4"}, {"n2", "n5"}}},
	} {
		pairs := Bridge(tc.all)
		checkWellFormed(t, tc.all, pairs)
		if !reflect.DeepEqual(pairs, tc.want) {
			t.Errorf("%d nodes: %v, want %v", len(tc.all), pairs, tc.want)
		}
		v := views(tc.all, pairs)
		if !reflect.DeepEqual(v[tc.bridge], tc.all) {
			t.Errorf("%d nodes: bridge %s sees %v, want everyone", len(tc.all), tc.bridge, v[tc.bridge])
		}
		half := len(tc.all) / 2
		left, right := tc.all[:half], tc.all[half+1:]
		for _, a := range left {
			for _, b := range right {
				if slices.Contains(v[a], b) {
					t.Errorf("%d nodes: halves meet: %s sees %s", len(tc.all), a, b)
				}
			}
		}
		// Everyone else sees exactly its half plus the bridge.
		for _, side := range [][]string{append(slices.Clone(left), tc.bridge), tc.all[half:]} {
			slices.Sort(side)
			for _, n := range side {
				if n != tc.bridge && !reflect.DeepEqual(v[n], side) {
					t.Errorf("%d nodes: %s sees %v, want %v", len(tc.all), n, v[n], side)
				}
			}
		}
	}
	// The order of all chooses the bridge.
	if got, want := Bridge([]string{"n3", "n1", "n2"}), [][2]string{{"n2", "n3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Bridge(n3,n1,n2) = %v, want %v (n1 bridges)", got, want)
	}
	if got := Bridge([]string{"n1", "n2"}); got != nil {
		t.Errorf("Bridge of 2: %v", got)
	}
}

func TestTopologyMajoritiesRing(t *testing.T) {
	for size := 3; size <= 9; size++ {
		all := make([]string, size)
		for i := range all {
			all[i] = fmt.Sprintf("n%d", i+1)
		}
		pairs := MajoritiesRing(all)
		checkWellFormed(t, all, pairs)
		if len(pairs) == 0 {
			t.Errorf("%d nodes: nothing cut", size)
		}
		v := views(all, pairs)
		distinct := map[string]string{}
		for _, n := range all {
			if len(v[n]) <= size/2 {
				t.Errorf("%d nodes: %s sees %v, not a majority", size, n, v[n])
			}
			key := strings.Join(v[n], ",")
			if other, ok := distinct[key]; ok {
				t.Errorf("%d nodes: %s and %s both see %s", size, n, other, key)
			}
			distinct[key] = n
		}
	}
	// The documented shapes.
	if got, want := MajoritiesRing(three), [][2]string{{"n1", "n3"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("3 nodes: %v, want %v", got, want)
	}
	want5 := [][2]string{{"n1", "n3"}, {"n1", "n4"}, {"n2", "n4"}, {"n2", "n5"}, {"n3", "n5"}}
	if got := MajoritiesRing(five); !reflect.DeepEqual(got, want5) {
		t.Errorf("5 nodes: %v, want the pentagon's diagonals %v", got, want5)
	}
	if got := MajoritiesRing([]string{"n1", "n2"}); got != nil {
		t.Errorf("2 nodes: %v", got)
	}
}

func TestTopologyClientCut(t *testing.T) {
	for _, servers := range [][]string{three, five} {
		all := append([]string{"c1"}, servers...)
		pairs := ClientCut("c1", servers)
		checkWellFormed(t, all, pairs)
		v := views(all, pairs)
		if !reflect.DeepEqual(v["c1"], []string{"c1"}) {
			t.Errorf("client sees %v", v["c1"])
		}
		for _, s := range servers {
			if !reflect.DeepEqual(v[s], servers) {
				t.Errorf("server %s sees %v, want all servers", s, v[s])
			}
		}
	}
}

func TestTopologyDeterministic(t *testing.T) {
	rev := slices.Clone(five)
	slices.Reverse(rev)
	if !reflect.DeepEqual(Isolate("n2", five), Isolate("n2", rev)) {
		t.Error("Isolate depends on input order")
	}
	if !reflect.DeepEqual(Split(five[:2], five[2:]), Split(rev[3:], rev[:3])) {
		t.Error("Split depends on group member order")
	}
	if !reflect.DeepEqual(ClientCut("c", five), ClientCut("c", rev)) {
		t.Error("ClientCut depends on input order")
	}
	for range 3 {
		if !reflect.DeepEqual(MajoritiesRing(five), MajoritiesRing(five)) || !reflect.DeepEqual(Bridge(five), Bridge(five)) {
			t.Error("not deterministic")
		}
	}
}
