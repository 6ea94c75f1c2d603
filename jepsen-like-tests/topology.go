//go:build jepsen && linux

package jepsen

// Partition topologies, after Jepsen's nemesis grudges (jepsen.nemesis: isolate, split,
// bridge, majorities-ring). Each function returns the host pairs to pass to Net.Block. They
// are pure: pairs are normalised (a < b), free of duplicates and self-pairs, and sorted.
//
// Jepsen's grudges are directional (node x ignores node y); Net.Block cuts both directions.
// For every topology here the two coincide except MajoritiesRing on 3 nodes, see there.
// Where a topology depends on node order (Bridge, MajoritiesRing) the order of the argument
// is used as is: shuffle it with the run's seeded rand to vary which node plays which part.

import (
	"cmp"
	"slices"
)

// Isolate cuts node from every other node of all.
func Isolate(node string, all []string) [][2]string {
	var pairs [][2]string
	for _, other := range all {
		pairs = append(pairs, [2]string{node, other})
	}
	return normalise(pairs)
}

// Split cuts every pair of nodes in different groups; nodes within a group still see each
// other. A node listed in two groups stays connected to both (it bridges them); keep groups
// disjoint for a clean split. Nodes in no group are not mentioned, so stay connected.
func Split(groups ...[]string) [][2]string {
	var pairs [][2]string
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					pairs = append(pairs, [2]string{a, b})
				}
			}
		}
	}
	// A node in two groups would otherwise be cut from group-mates.
	together := map[[2]string]bool{}
	for _, g := range groups {
		for _, p := range allPairs(g) {
			together[p] = true
		}
	}
	return slices.DeleteFunc(normalise(pairs), func(p [2]string) bool { return together[p] })
}

// Bridge is Jepsen's bridge: all is cut into two halves, all[:n/2] and all[n/2:], and the
// first node of the second half, all[n/2], the bridge, stays connected to everyone. So the
// two sides {all[:n/2], bridge} and {all[n/2:]} share exactly the bridge, and only the bridge
// can see a majority. For 3 nodes a,b,c: sides {a,b} and {b,c}, a–c cut. For 5 nodes
// a,b,c,d,e: sides {a,b,c} and {c,d,e}; a–d, a–e, b–d, b–e cut.
func Bridge(all []string) [][2]string {
	if len(all) < 3 {
		return nil
	}
	half := len(all) / 2
	bridge := all[half]
	var pairs [][2]string
	for _, a := range all[:half] {
		for _, b := range all[half+1:] {
			pairs = append(pairs, [2]string{a, b})
		}
	}
	return slices.DeleteFunc(normalise(pairs), func(p [2]string) bool {
		return p[0] == bridge || p[1] == bridge
	})
}

// MajoritiesRing is Jepsen's majorities-ring: every node sees a majority (counting itself),
// but no two nodes see the same majority, so no majority agrees on who is in it.
//
// For n >= 4 nodes, placed on a ring in the order of all, each node keeps links to the k
// nearest nodes on either side, with k the smallest such that 2k+1 is a majority, and is cut
// from the rest; each node's view is the arc of 2k+1 nodes centred on it. For 5 nodes a..e
// that is the pentagon a-b-c-d-e-a: a sees {e,a,b}, b sees {a,b,c}, ... and a–c, a–d, b–d,
// b–e, c–e are cut.
//
// For 3 nodes Jepsen's ring is directional (a ignores b, b ignores c, c ignores a), which
// symmetric cuts cannot express. The symmetric answer is one cut, all[0]–all[2]: views
// {a,b}, {a,b,c}, {b,c} are majorities and distinct, but all[1] sees everyone, so on 3
// nodes this is the same partition as Bridge. Fewer than 3 nodes: nil.
func MajoritiesRing(all []string) [][2]string {
	n := len(all)
	switch {
	case n < 3:
		return nil
	case n == 3:
		return normalise([][2]string{{all[0], all[2]}})
	}
	majority := n/2 + 1
	k := majority / 2 // smallest k with 2k+1 >= majority
	var pairs [][2]string
	for i := range n {
		for j := i + 1; j < n; j++ {
			if d := min(j-i, n-(j-i)); d > k {
				pairs = append(pairs, [2]string{all[i], all[j]})
			}
		}
	}
	return normalise(pairs)
}

// ClientCut cuts client from every server; servers still see each other.
func ClientCut(client string, servers []string) [][2]string {
	var pairs [][2]string
	for _, s := range servers {
		pairs = append(pairs, [2]string{client, s})
	}
	return normalise(pairs)
}

// allPairs returns every normalised pair of distinct nodes in nodes.
func allPairs(nodes []string) [][2]string {
	var pairs [][2]string
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			pairs = append(pairs, [2]string{a, b})
		}
	}
	return normalise(pairs)
}

// normalise orders each pair a < b, drops self-pairs and duplicates, and sorts the pairs.
func normalise(pairs [][2]string) [][2]string {
	out := make([][2]string, 0, len(pairs))
	for _, p := range pairs {
		switch {
		case p[0] == p[1]:
			continue
		case p[0] > p[1]:
			p[0], p[1] = p[1], p[0]
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y [2]string) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]))
	})
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil
	}
	return out
}
