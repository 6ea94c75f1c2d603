//go:build ration_faults

package faults

import "testing"

func TestSetAndParseControl(t *testing.T) {
	if err := Set(string(TimeFromReceipt)); err != nil {
		t.Fatal(err)
	}
	defer Set()
	if !Active(TimeFromReceipt) || Active(AckBeforeCommit) {
		t.Fatal("Active does not match Set")
	}
	c, err := ParseControl([]byte("rate_ppm=-2000\nwall_offset_ns=-120000000000\n"))
	if err != nil || c.RatePPM != -2000 || c.WallOffsetNS != -120e9 {
		t.Fatalf("ParseControl = %+v, %v", c, err)
	}
	for _, bad := range []string{"rate_ppm=x", "speed=1", "rate_ppm=-1000000", "rate_ppm"} {
		if _, err := ParseControl([]byte(bad)); err == nil {
			t.Errorf("ParseControl(%q) accepted", bad)
		}
	}
}
