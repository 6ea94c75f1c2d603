package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseAttrs(t *testing.T) {
	got, err := parseAttrs("tenant=acme,route=/a=b")
	if err != nil || got["tenant"] != "acme" || got["route"] != "/a=b" || len(got) != 2 {
		t.Fatalf("parseAttrs = %v, %v", got, err)
	}
	if got, err := parseAttrs(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"tenant", "=x", "a=1,a=2", "a=1,"} {
		if _, err := parseAttrs(bad); err == nil {
			t.Errorf("parseAttrs(%q) accepted", bad)
		}
	}
}

func TestLeaseAcquireUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lease", "acquire"}, "--policy is required"},
		{[]string{"lease", "acquire", "--policy", "p", "--key", "tenant"}, "want A=V"},
		{[]string{"lease", "acquire", "--policy", "p", "--rate", "abc"}, `--rate "abc"`},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errOut.String(), c.want)
		}
	}
}
