//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestInstancesFlagRefused: --instances out of range, or with a mode it
// does not combine with, is a usage error (exit 2) naming the flag,
// before anything is dialled.
func TestInstancesFlagRefused(t *testing.T) {
	base := []string{"--servers", "127.0.0.1:1", "--id", "c1", "--policy", "p", "--key", "tenant=t1", "--dir", t.TempDir()}
	for _, extra := range [][]string{
		{"--instances", "-1"},
		{"--instances", "1001"},
		{"--instances", "2", "--routes", "3"},
		{"--instances", "2", "--settle", "reserve"},
		{"--instances", "2", "--slot-workers", "2"},
		{"--instances", "2", "--rate-file", "/nonexistent"},
	} {
		var out bytes.Buffer
		if code := run(append(append([]string{}, base...), extra...), &out); code != 2 || !strings.Contains(out.String(), "--instances") {
			t.Errorf("%v: exit %d, output %q; want 2 and a message naming --instances", extra, code, out.String())
		}
	}
	var out bytes.Buffer
	edge := []string{"--edge", "127.0.0.1:1", "--id", "c1", "--policy", "p", "--instances", "2"}
	if code := run(edge, &out); code != 2 || !strings.Contains(out.String(), "--instances") {
		t.Errorf("--edge with --instances: exit %d, output %q; want 2 and a message naming --instances", code, out.String())
	}
}
