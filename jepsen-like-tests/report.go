//go:build jepsen && linux

package jepsen

// A run leaves summary.json beside its histories: the verdicts and the
// numbers behind them, in a byte-stable form so two runs of the same seed
// can be diffed.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Expected outcomes of a checker.
const (
	ExpectPass = "pass"
	ExpectFail = "fail" // a negative control: the checker must catch it
)

// CheckerResult is one checker's verdict on a run.
type CheckerResult struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"` // the property held
	// Expected is ExpectPass, or ExpectFail for a negative control (a fault
	// injected on purpose that the checker must report).
	Expected string `json:"expected"`
	Detail   string `json:"detail,omitempty"`
}

// AsExpected reports whether the verdict is the one wanted: OK for a normal
// checker, not OK for a negative control. An empty Expected means pass.
func (c CheckerResult) AsExpected() bool {
	if c.Expected == ExpectFail {
		return !c.OK
	}
	return c.OK
}

// AllAsExpected is the run's verdict: every checker came out as expected.
// It is false for no checkers, so a run that checked nothing cannot pass.
func AllAsExpected(cs []CheckerResult) bool {
	for _, c := range cs {
		if !c.AsExpected() {
			return false
		}
	}
	return len(cs) > 0
}

// Summary is the content of summary.json.
type Summary struct {
	Name        string          `json:"name"`
	Seed        int64           `json:"seed"`
	StartMono   int64           `json:"start_mono_ns"`
	EndMono     int64           `json:"end_mono_ns"`
	Bound       BoundSpec       `json:"bound"`
	Windows     []WindowResult  `json:"windows"`
	Utilization float64         `json:"utilization"`
	Checkers    []CheckerResult `json:"checkers"`
	Pass        bool            `json:"pass"`
	// Extra holds scenario-specific numbers (recovery time, replicas that
	// admitted after heal, ...). Map keys are written sorted.
	Extra map[string]any `json:"extra,omitempty"`
}

// SummaryFile is the name WriteSummary writes in the run directory.
const SummaryFile = "summary.json"

// WriteSummary writes dir/summary.json, indented, with struct fields in
// declaration order and map keys sorted, so equal summaries give equal
// bytes. It writes a temporary file and renames it, so a reader never sees
// half a summary.
func WriteSummary(dir string, s Summary) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("summary %s: %w", s.Name, err)
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(dir, SummaryFile+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, SummaryFile))
}

// ReadSummary reads dir/summary.json back.
func ReadSummary(dir string) (Summary, error) {
	var s Summary
	data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, SummaryFile), err)
	}
	return s, nil
}
