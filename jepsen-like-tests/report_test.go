//go:build jepsen && linux

package jepsen

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func sampleSummary() Summary {
	recs, b := burstThenRate()
	b.Slack = map[string]int64{"z-late": 2, "fail-open": 1}
	res := CheckBound(recs, b, DefaultWindows(10*time.Second))
	return Summary{
		Name: "partition-leader", Seed: 7, StartMono: 0, EndMono: int64(10 * time.Second),
		Bound: b, Windows: res.Windows, Utilization: 1.5,
		Checkers: []CheckerResult{
			{Name: "bound", OK: res.OK, Expected: ExpectPass, Detail: res.Describe()},
			{Name: "bound-without-slack", OK: false, Expected: ExpectFail},
		},
		Pass:  true,
		Extra: map[string]any{"recovery_ns": int64(1800 * time.Millisecond), "a_replicas": []string{"r1", "r2"}},
	}
}

func TestSummaryWriteIsDeterministicAndRoundTrips(t *testing.T) {
	s := sampleSummary()
	var outs [2][]byte
	for i := range outs {
		dir := t.TempDir()
		if err := WriteSummary(dir, s); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = data
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("left behind %d files", len(entries))
		}
		back, err := ReadSummary(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Windows, s.Windows) || !reflect.DeepEqual(back.Checkers, s.Checkers) ||
			!reflect.DeepEqual(back.Bound, s.Bound) || back.Name != s.Name || back.Utilization != s.Utilization {
			t.Fatalf("round trip changed the summary:\n%+v\n%+v", back, s)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two writes of one summary differ")
	}
	if !bytes.HasPrefix(outs[0], []byte("{\n  \"name\"")) || !json.Valid(outs[0]) {
		t.Fatalf("not indented JSON in field order:\n%s", outs[0])
	}
	// Map keys sorted.
	if i, j := bytes.Index(outs[0], []byte(`"fail-open"`)), bytes.Index(outs[0], []byte(`"z-late"`)); i < 0 || j < i {
		t.Fatalf("slack keys not sorted:\n%s", outs[0])
	}
	if i, j := bytes.Index(outs[0], []byte(`"a_replicas"`)), bytes.Index(outs[0], []byte(`"recovery_ns"`)); i < 0 || j < i {
		t.Fatalf("extra keys not sorted:\n%s", outs[0])
	}
}

func TestSummaryCheckerExpectations(t *testing.T) {
	for _, tc := range []struct {
		c    CheckerResult
		want bool
	}{
		{CheckerResult{OK: true, Expected: ExpectPass}, true},
		{CheckerResult{OK: false, Expected: ExpectPass}, false},
		{CheckerResult{OK: true}, true},
		{CheckerResult{OK: false, Expected: ExpectFail}, true}, // the control was caught
		{CheckerResult{OK: true, Expected: ExpectFail}, false}, // the checker missed the control
	} {
		if got := tc.c.AsExpected(); got != tc.want {
			t.Errorf("%+v: AsExpected %v", tc.c, got)
		}
	}
	if AllAsExpected(nil) {
		t.Error("no checkers passed")
	}
	if !AllAsExpected(sampleSummary().Checkers) {
		t.Error("sample checkers should be as expected")
	}
}
