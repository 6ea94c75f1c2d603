package coordinator

import (
	"slices"
	"testing"
)

// One --join list names every server of a StatefulSet, this one too: the
// server skips its own address, by bind or advertised address as written,
// so its join loop waits for another server instead of ending at once on
// itself.
func TestJoinOthersSkipsOwnAddress(t *testing.T) {
	all := []string{
		"ration-0.ration-headless.ns.svc:7420",
		"ration-1.ration-headless.ns.svc:7420",
		"ration-2.ration-headless.ns.svc:7420",
	}
	cases := []struct {
		name             string
		bind, advertise  string
		join, wantOthers []string
	}{
		{"advertised name", "0.0.0.0:7420", all[1], all, []string{all[0], all[2]}},
		{"bind address", "10.0.0.1:7420", "", []string{"10.0.0.1:7420", "10.0.0.2:7420"}, []string{"10.0.0.2:7420"}},
		{"only itself", "0.0.0.0:7420", all[0], all[:1], nil},
		{"not named", "0.0.0.0:7420", "ration-9.ration-headless.ns.svc:7420", all, all},
	}
	for _, tc := range cases {
		c := Config{GossipAddr: tc.bind, AdvertiseGossipAddr: tc.advertise, Join: tc.join}
		if got := c.joinOthers(); !slices.Equal(got, tc.wantOthers) {
			t.Errorf("%s: joinOthers() = %q, want %q", tc.name, got, tc.wantOthers)
		}
	}
}
