package fsm

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"google.golang.org/protobuf/encoding/protojson"
)

// Snapshot fixtures: snapshots written by this version, checked in under
// testdata/snapshots, which every later version must restore to the same
// state (rqlite keeps such fixtures). Each NAME.snap has a NAME.json: the
// state as the read API shows it. A later version that changes the format
// keeps these files and adds its own; it never rewrites them.
//
// Regenerate (only when adding a fixture for a new version):
//
//	go test ./fsm -run TestSnapshotFixtures -update-fixtures
var updateFixtures = flag.Bool("update-fixtures", false, "write fsm/testdata/snapshots (new fixtures only)")

// fixtureScripts are the histories the fixtures are taken after.
var fixtureScripts = map[string]func(t *testing.T, h *harness){
	// v2 with every switch of this version on: versioned terms, a cut
	// share whose clamp returned to the pool, retired budgets, a client
	// record holding error kinds.
	"v2-features-all": func(t *testing.T, h *harness) {
		h.enableFeatures(KnownFeatures)
		clampScript(t, h, 10_000)
		erringBatch(h, 3*sec, 1)
		h.batch(3*sec, acquire(caller("c", 1, 1), tenant("other")))
		h.deletePolicy(4*sec, "global")
	},
	// v3: ACLs bootstrapped, with a client token (its binding and client
	// IDs) next to leases.
	"v3-acl": func(t *testing.T, h *harness) {
		h.enableFeatures(KnownFeatures)
		convergeScript(t, h)
		mgmt, _ := testToken(t, "mgmt", acl.Management)
		cl, _ := testToken(t, "acme", acl.Client, acl.Binding{Policy: "per-tenant", Matches: []acl.Match{{Attribute: "tenant", Value: "acme", Prefix: true}}})
		for _, cmd := range []*api.ACLCommand{bootstrapCmd(mgmt), createCmd(cl)} {
			if r := h.apply(CmdACL, 3*sec, cmd); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	},
	// v4: leased windows (frame kind 6): a fixed window, a calendar month
	// in Europe/Paris and an approximate sliding window, with chunks, a
	// released one and a renewed one, and the epoch from a wall clock.
	"v4-windows": func(t *testing.T, h *harness) {
		h.apply(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: KnownFeatures, WallUnixNanos: wallAtSwitch})
		cmd := windowPolicies("10", `  - name: monthly
    algorithm: fixed-window
    limit: 1000
    period: month
    timezone: Europe/Paris
  - name: approx
    algorithm: sliding-window-approx
    limit: 8
    window: 2s
`)
		if r := h.apply(CmdApplyPolicies, sec, cmd); r.Err != nil {
			t.Fatal(r.Err)
		}
		a := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 4000))).GetGrant()
		keyLeaseOf(t, h.batch(2*sec, wRenew(caller("a", 1, 2), "acme", a.GetLeaseId(), 4000)))
		b := keyLeaseOf(t, h.batch(2*sec+1, wAcquire(caller("b", 1, 1), "acme", 4000))).GetGrant()
		h.batch(2*sec+2, wRelease(caller("b", 1, 2), "acme", b.GetLeaseId(), 1000))
		for i, pol := range []string{"monthly", "approx"} {
			op := wAcquire(caller("c", 1, uint64(i+1)), "acme", 4000)
			op.GetAcquire().Keys[0].Key = &api.Key{Policy: pol}
			keyLeaseOf(t, h.batch(3*sec, op))
		}
	},
	// v5: a window key that left a spent month for 1 s windows
	// (FeatureWindowSpent: WindowKeySnapshot.spent).
	"v5-window-spent": func(t *testing.T, h *harness) {
		h.apply(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: KnownFeatures, WallUnixNanos: wallAtSwitch})
		if r := h.apply(CmdApplyPolicies, sec, windowPolicyAt("20", "period: month")); r.Err != nil {
			t.Fatal(r.Err)
		}
		keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000_000)))
		if r := h.apply(CmdApplyPolicies, 3*sec, windowPolicyAt("20", "window: 1s")); r.Err != nil {
			t.Fatal(r.Err)
		}
		keyLeaseOf(t, h.batch(3*sec, wAcquire(caller("b", 1, 1), "acme", 1000)))
	},
	// v1: no switch on (the format older servers write).
	"v1-no-features": func(t *testing.T, h *harness) {
		convergeScript(t, h)
		erringBatch(h, 3*sec, 1)
	},
}

// fixtureView is what a fixture's state looks like through the read API.
func fixtureView(t *testing.T, f *FSM) []byte {
	t.Helper()
	view := map[string]any{"cluster_time_nanos": f.ClusterTime(), "features": f.Features()}
	pols := map[string]any{}
	for _, p := range f.Policies() {
		ls := f.Leases(p.Name, "", f.ClusterTime())
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ls)
		if err != nil {
			t.Fatal(err)
		}
		pols[p.Name] = json.RawMessage(js)
	}
	view["policies"] = pols
	if f.ACLBootstrapped() {
		var toks []any
		for _, tok := range f.ACLTokens() {
			js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(TokenToProto(&tok))
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, json.RawMessage(js))
		}
		view["acl_tokens"] = toks
	}
	p, k, l, c := f.Counts()
	view["counts"] = []int{p, k, l, c}
	out, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// Re-indent the embedded protojson (its spacing is not stable).
	var tidy bytes.Buffer
	if err := json.Indent(&tidy, out, "", "  "); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(tidy.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	out, _ = json.MarshalIndent(v, "", "  ")
	return append(out, '\n')
}

func TestSnapshotFixtures(t *testing.T) {
	dir := filepath.Join("testdata", "snapshots")
	if *updateFixtures {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, script := range fixtureScripts {
			snapPath := filepath.Join(dir, name+".snap")
			if _, err := os.Stat(snapPath); err == nil {
				continue // never rewrite a checked-in fixture
			}
			h := newHarness(t)
			script(t, h)
			if err := os.WriteFile(snapPath, snapshotBytes(t, h.f), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name+".json"), fixtureView(t, h.f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	snaps, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	if err != nil || len(snaps) < len(fixtureScripts) {
		t.Fatalf("fixtures %v (%v): want at least %d", snaps, err, len(fixtureScripts))
	}
	for _, path := range snaps {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f := New(nil)
			if err := f.Restore(nopCloser{bytes.NewReader(raw)}); err != nil {
				t.Fatalf("this version cannot restore %s: %v", path, err)
			}
			want, err := os.ReadFile(path[:len(path)-len(".snap")] + ".json")
			if err != nil {
				t.Fatal(err)
			}
			if got := fixtureView(t, f); !bytes.Equal(got, want) {
				t.Fatalf("%s restores to a different state:\n%s\nwant:\n%s", path, got, want)
			}
			// The restored state carries on: its leases expire, and a new
			// client can acquire.
			h := &harness{t: t, f: f, index: 1 << 40}
			if r := h.apply(CmdExpire, f.ClusterTime()+60*sec, &api.ExpireCommand{ClientRetentionNanos: sec}); r.Err != nil {
				t.Fatal(r.Err)
			}
			if ops := h.batch(f.ClusterTime()+sec, acquire(caller("fixture-probe", 1, 1), tenant("acme"))); ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
				t.Fatalf("after restoring %s an acquire failed: %v %v", path, ops[0].Err, ops[0].Lease)
			}
		})
	}
}
