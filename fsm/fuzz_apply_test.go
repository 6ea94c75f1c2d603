package fsm

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"google.golang.org/protobuf/proto"
)

// Fuzz targets for what reaches the state machine from the log and from
// snapshots (docs/security.md, "Abuse: limits and fuzzing"). Apply stops
// the server loudly, by design, on an entry it cannot decode and on a
// command type or feature switch it does not know (fsm.go: a server older
// than its log must not apply it differently); nothing else may panic.
// Restore refuses bad bytes with an error, never a panic.

// loudStop reports whether v, a recovered panic, is one of Apply's
// deliberate stops (fsm.go), matched by message: a corrupt entry
// (ErrCorruptEntry, "fsm: log index N[ (type)]: fsm: corrupt log entry:
// ..."), an unknown command type, unknown feature switches.
func loudStop(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(s, "fsm: log index ") && strings.Contains(s, ": "+ErrCorruptEntry.Error()+": "):
		return true
	case strings.HasPrefix(s, "fsm: log index ") && strings.Contains(s, ": "+ErrPreBaseline.Error()+": "):
		return true
	case strings.HasPrefix(s, "fsm: unknown command type ") && strings.HasSuffix(s, "this server is older than the log; upgrade it"):
		return true
	case strings.HasPrefix(s, "fsm: feature switches ") && strings.HasSuffix(s, "are unknown to this server, which is older than the log; upgrade it"):
		return true
	}
	return false
}

// applyChecked applies l to f. stopped: Apply stopped loudly (the server
// would exit here); any other panic fails the test.
func applyChecked(t *testing.T, f *FSM, l *raft.Log) (res any, stopped bool) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			if !loudStop(v) {
				t.Fatalf("Apply(index %d, type %v, %d bytes %x) panicked with something other than a loud stop: %v\n%s", l.Index, l.Type, len(l.Data), l.Data, v, debug.Stack())
			}
			stopped = true
		}
	}()
	return f.Apply(l), false
}

// sameAfterRoundTrip checks that f snapshots, and that the snapshot
// restores to an equal state hash.
func sameAfterRoundTrip(t *testing.T, f *FSM, what string) {
	t.Helper()
	_, want := f.StateHash()
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f))}); err != nil {
		t.Fatalf("%s: the state's own snapshot does not restore: %v", what, err)
	}
	if _, got := g.StateHash(); got != want {
		t.Fatalf("%s: state hash %s after a snapshot round trip, was %s", what, got, want)
	}
	// The derived indexes (index.go) equal a rebuild, before and after.
	for _, s := range []*state{f.st, g.st} {
		if err := checkIndex(s); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func checkLedgers(t *testing.T, f *FSM, what string) {
	t.Helper()
	for pn, keys := range f.st.keys {
		for ck, kl := range keys.all() {
			if err := kl.ledger.CheckInvariants(); err != nil {
				t.Fatalf("%s: ledger %s/%s: %v", what, pn, ck, err)
			}
		}
	}
}

// fuzzTypes are the command types a typed record picks from: every known
// one, an ignorable unknown one and a plain unknown one.
var fuzzTypes = []CommandType{CmdApplyPolicies, CmdDeletePolicy, CmdLeaseBatch, CmdExpire, CmdSetFeatures, CmdACL, IgnorableFlag | 0x3f, 0x3f}

// fuzzEntries splits fuzz input into log entries: records of a 2-byte
// little-endian length and that many bytes. An empty record is a no-op
// entry (not a command). A record whose first byte has the high bit clear
// is the rest of the record as raw entry data; with it set, an entry is
// built: type fuzzTypes[b&0x7f], cluster time from the next byte (in
// steps of 100 ms after the previous entry's), the rest as the body.
func fuzzEntries(data []byte) []*raft.Log {
	var out []*raft.Log
	clock := int64(sec)
	for index := uint64(100); len(data) >= 2 && len(out) < 32; index++ {
		n := int(binary.LittleEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		rec := data[:n]
		data = data[n:]
		l := &raft.Log{Index: index, Type: raft.LogCommand}
		switch {
		case len(rec) == 0:
			l.Type = raft.LogNoop
		case rec[0]&0x80 == 0:
			l.Data = rec[1:]
		default:
			ct := fuzzTypes[int(rec[0]&0x7f)%len(fuzzTypes)]
			if len(rec) > 1 {
				clock += int64(rec[1]) * 1e8
				rec = rec[1:]
			}
			l.Data = make([]byte, headerLen, headerLen+len(rec)-1)
			l.Data[0] = byte(ct)
			binary.BigEndian.PutUint64(l.Data[1:], uint64(clock))
			l.Data = append(l.Data, rec[1:]...)
		}
		out = append(out, l)
	}
	return out
}

// record frames entry data as a raw record of fuzzEntries.
func record(data []byte) []byte {
	out := binary.LittleEndian.AppendUint16(nil, uint16(len(data)+1))
	return append(append(out, 0), data...)
}

// typedRecord frames a message as a typed record (type index i, clock step
// dt).
func typedRecord(i int, dt byte, msg proto.Message) []byte {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		panic(err)
	}
	out := binary.LittleEndian.AppendUint16(nil, uint16(len(body)+2))
	return append(append(out, 0x80|byte(i), dt), body...)
}

func mustEncode(ct CommandType, at int64, msg proto.Message) []byte {
	b, err := Encode(ct, at, msg)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzApplyEntry applies arbitrary log entries, raw or built from the
// input, to a state machine holding the test policies: Apply may stop
// loudly (loudStop) and the sequence ends there, as the server would;
// nothing else panics; every command answers a *Result; every ledger
// keeps its invariants; and after every entry the state snapshots and
// restores to an equal state hash.
func FuzzApplyEntry(f *testing.F) {
	c := caller("a", 1, 1)
	acq := &api.LeaseBatchCommand{Ops: []*api.LeaseOp{acquire(c, tenant("acme"), &api.Key{Policy: "global"})}}
	ren := &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: caller("a", 1, 2),
		Keys: []*api.RenewKey{{Key: tenant("acme"), LeaseId: 1, Demand: &api.Demand{RateMilliPerSec: 5000, BurstMilli: 5000}, AckedVersion: 1}}}}}}}
	rel := &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: caller("a", 1, 3),
		Keys: []*api.ReleaseKey{{Key: tenant("acme"), LeaseId: 1, UnspentMilli: 1000}}}}}}}
	h := newHarness(f)
	pols := &api.ApplyPoliciesCommand{}
	for _, p := range h.f.Policies() {
		pols.Policies = append(pols.Policies, p.ToProto())
	}
	feats := &api.SetFeaturesCommand{Features: KnownFeatures}
	var raw, typed []byte
	for i, e := range []struct {
		ct  CommandType
		msg proto.Message
	}{
		{CmdSetFeatures, feats}, {CmdApplyPolicies, pols}, {CmdLeaseBatch, acq}, {CmdLeaseBatch, ren},
		{CmdExpire, &api.ExpireCommand{}}, {CmdLeaseBatch, rel}, {CmdDeletePolicy, &api.DeletePolicyCommand{Name: "global"}},
	} {
		raw = append(raw, record(mustEncode(e.ct, int64(i+1)*sec, e.msg))...)
		typed = append(typed, typedRecord(int(e.ct)-1, 10, e.msg)...)
	}
	f.Add(raw)
	f.Add(typed)
	f.Add(append(record(mustEncode(IgnorableFlag|0x3f, sec, &api.ExpireCommand{})), record(mustEncode(CmdLeaseBatch, 2*sec, acq))...))
	f.Add(record([]byte{3}))                                             // short: a loud stop
	f.Add(record(append([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1}, 0xff, 0xff))) // bad body: a loud stop
	f.Add(record(mustEncode(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: 1 << 40})))
	f.Add([]byte{0, 0, 0, 0})
	// ACLs: the switch on, a bootstrap, a client token, a delete.
	aclTok := func(id, role string) *api.ACLToken {
		p := &api.ACLToken{AccessorId: id, Role: role, Salt: make([]byte, 16), Hash: make([]byte, 32)}
		if role == "client" {
			p.Bindings, p.ClientIds = []*api.ACLBinding{{Policy: "per-tenant", Matches: []*api.ACLMatch{{Attribute: "tenant", Value: "a", Prefix: true}}}}, []string{"c-*"}
		}
		return p
	}
	f.Add(append(append(append(record(mustEncode(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: KnownFeatures})),
		record(mustEncode(CmdACL, sec, bootstrapCmd(aclTok("m", "management"))))...),
		record(mustEncode(CmdACL, 2*sec, createCmd(aclTok("c", "client"))))...),
		record(mustEncode(CmdACL, 3*sec, deleteCmd("m")))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t)
		for _, l := range fuzzEntries(data) {
			res, stopped := applyChecked(t, h.f, l)
			if stopped {
				return // the server stops here
			}
			if l.Type == raft.LogCommand {
				if r, ok := res.(*Result); !ok || r == nil {
					t.Fatalf("entry %d answered %T %v, want a *Result", l.Index, res, res)
				}
			} else if res != nil {
				t.Fatalf("a %v entry answered %v", l.Type, res)
			}
			checkLedgers(t, h.f, "after an entry")
			sameAfterRoundTrip(t, h.f, "after an entry")
		}
	})
}

// FuzzRestore restores arbitrary bytes over a state machine that holds
// state: an error leaves that state as it was; a success yields a state
// that snapshots and restores to the same hash, keeps its ledgers'
// invariants, and applies an expire without panicking; PrepareRestore of
// the same bytes never panics either, and what it makes restores.
func FuzzRestore(f *testing.F) {
	h := newHarness(f)
	f.Add(snapshotBytes(f, h.f))
	// A state with every switch on, leases, a record holding errors and
	// a retired policy's budgets.
	h = newHarness(f)
	h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"), &api.Key{Policy: "global"}))
	erringBatch(h, 2*sec, 1)
	h.batch(3*sec, acquire(caller("c", 1, 1), tenant("other")))
	h.deletePolicy(4*sec, "global")
	f.Add(snapshotBytes(f, h.f))
	files, _ := filepath.Glob(filepath.Join("testdata", "snapshots", "*.snap"))
	if len(files) == 0 {
		f.Fatal("no snapshot fixtures in testdata/snapshots")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(nil))
	f.Add([]byte(snapshotMagic))
	f.Add([]byte("ration-fsm-snapshot-v1\n\x02\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t)
		h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))
		_, before := h.f.StateHash()
		if err := h.f.Restore(nopCloser{bytes.NewReader(data)}); err != nil {
			if _, after := h.f.StateHash(); after != before {
				t.Fatalf("a refused restore (%v) changed the state", err)
			}
		} else {
			checkLedgers(t, h.f, "after a restore")
			sameAfterRoundTrip(t, h.f, "after a restore")
			h.index = 1000
			now := h.f.ClusterTime() + sec
			if _, stopped := applyChecked(t, h.f, &raft.Log{Index: 1000, Type: raft.LogCommand, Data: mustEncode(CmdExpire, now, &api.ExpireCommand{})}); stopped {
				t.Fatal("an expire stopped the server after a successful restore")
			}
			checkLedgers(t, h.f, "after an expire on a restored state")
			sameAfterRoundTrip(t, h.f, "after an expire on a restored state")
		}
		prepared, err := PrepareRestore(data, baseAt(h.f, 5*sec))
		if err != nil {
			return
		}
		g := New(nil)
		if err := g.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
			t.Fatalf("PrepareRestore made a snapshot that does not restore: %v", err)
		}
		sameAfterRoundTrip(t, g, "after a prepared restore")
	})
}

// loudStop accepts exactly Apply's deliberate stops, taken from Apply
// itself, and nothing else (a negative control for FuzzApplyEntry).
func TestLoudStopMatchesOnlyApplysStops(t *testing.T) {
	stop := func(data []byte) (v any) {
		defer func() { v = recover() }()
		f := New(nil)
		f.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: mustEncode(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: BaselineFeatures})})
		f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: data})
		return nil
	}
	preBaseline := func() (v any) {
		defer func() { v = recover() }()
		New(nil).Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: mustEncode(CmdExpire, sec, &api.ExpireCommand{})})
		return nil
	}
	if v := preBaseline(); v == nil || !loudStop(v) {
		t.Errorf("pre-baseline entry: Apply's stop %v is not recognised", v)
	}
	for name, data := range map[string][]byte{
		"short entry":     {3},
		"negative time":   {3, 0xff, 0, 0, 0, 0, 0, 0, 0},
		"bad body":        append([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1}, 0xff, 0xff),
		"unknown type":    mustEncode(0x3f, sec, &api.ExpireCommand{}),
		"unknown feature": mustEncode(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: 1 << 40}),
	} {
		v := stop(data)
		if v == nil || !loudStop(v) {
			t.Errorf("%s: Apply's stop %v is not recognised", name, v)
		}
	}
	for _, v := range []any{
		"fsm: recorded response: proto: bad",
		"runtime error: index out of range [3] with length 3",
		"fsm: log index 3: something else",
		errString("fsm: log index 3: fsm: corrupt log entry: x"), // not a string
		nil,
	} {
		if loudStop(v) {
			t.Errorf("loudStop(%#v) = true, want a failure", v)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// The raw seed of FuzzApplyEntry applies whole: it reaches the lease
// paths, not just the decoder.
func TestFuzzApplySeedApplies(t *testing.T) {
	h := newHarness(t)
	pols := &api.ApplyPoliciesCommand{}
	for _, p := range h.f.Policies() {
		pols.Policies = append(pols.Policies, p.ToProto())
	}
	data := append(record(mustEncode(CmdApplyPolicies, sec, pols)), record(mustEncode(CmdLeaseBatch, 2*sec, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{acquire(caller("a", 1, 1), tenant("acme"))}}))...)
	data = append(data, typedRecord(int(CmdExpire)-1, 10, &api.ExpireCommand{})...)
	entries := fuzzEntries(data)
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	var last any
	for _, l := range entries {
		res, stopped := applyChecked(t, h.f, l)
		if stopped {
			t.Fatalf("entry %d stopped", l.Index)
		}
		if r := res.(*Result); r.Err != nil {
			t.Fatalf("entry %d: %v", l.Index, r.Err)
		}
		if l.Index == 101 {
			last = res
		}
	}
	if g := last.(*Result).Ops[0].Lease.GetLeases()[0].GetGrant(); g == nil {
		t.Fatal("the seed's acquire was not granted")
	}
}
