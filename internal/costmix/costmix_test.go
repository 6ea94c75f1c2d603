package costmix

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Mix
	}{
		{"1", Mix{{1, 1}}},
		{"1:70,2:20,5:10", Mix{{1, 70}, {2, 20}, {5, 10}}},
		{" 3 , 4:2", Mix{{3, 1}, {4, 2}}},
	} {
		got, err := Parse(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "-1:2", "1:0", "1:x", "a", "1:70,1:30", "1,", "1.5:2", "1:2:3", "2000000000"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, got)
		}
	}
	if m := (Mix{{1, 70}, {2, 20}, {5, 10}}).Mean(); m < 1.6-1e-9 || m > 1.6+1e-9 {
		t.Errorf("Mean = %v, want 1.6", m)
	}
}

func TestDrawFollowsWeights(t *testing.T) {
	mix := Mix{{1, 70}, {2, 20}, {5, 10}}
	rng := rand.New(rand.NewPCG(1, 2))
	n := map[int64]int{}
	for range 100_000 {
		n[mix.Draw(rng)]++
	}
	for _, cw := range mix {
		got := float64(n[cw.Cost]) / 100_000
		if want := float64(cw.Weight) / 100; got < want-0.01 || got > want+0.01 {
			t.Errorf("cost %d drawn %.3f of the time, want %.2f", cw.Cost, got, want)
		}
	}
}
