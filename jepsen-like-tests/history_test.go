//go:build jepsen && linux

package jepsen

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHistoryReadMergesAndDropsPartialLastLine(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "history-a.csv", HistoryHeader+"\n"+
		"300,a,api,k1,1000\n"+
		"100,a,api,k1,500\n"+
		"200,a,api,k2,1") // died mid-line: "1" may be the start of "1000"
	writeFile(t, dir, "history-b.csv", HistoryHeader+"\n"+
		"100,b,api,,2000\n"+ // empty key is allowed
		"250,b,api,k1,750\n")
	writeFile(t, dir, "history-c.csv", "t_mono_ns,rep") // died while writing the header
	writeFile(t, dir, "history-d.csv", "")              // died before writing anything
	writeFile(t, dir, "other.csv", "not,a,history\n")   // not matched by the glob

	recs, err := ReadHistories(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{100, "a", "api", "k1", 500, 100, 0, 0},
		{100, "b", "api", "", 2000, 100, 0, 0}, // tie: file a before file b
		{250, "b", "api", "k1", 750, 250, 0, 0},
		{300, "a", "api", "k1", 1000, 300, 0, 0},
	}
	if !slices.Equal(recs, want) {
		t.Fatalf("records\n got %v\nwant %v", recs, want)
	}
}

func TestHistoryRejectsMalformedLines(t *testing.T) {
	good := "100,a,api,k1,1000\n"
	for name, tc := range map[string]struct {
		content  string
		wantLine int
	}{
		"bad middle line":   {HistoryHeader + "\n" + good + "100,a,api,k1\n" + good, 3},
		"non-number time":   {HistoryHeader + "\n" + "x,a,api,k1,1000\n" + good, 2},
		"zero cost":         {HistoryHeader + "\n" + good + good + "100,a,api,k1,0\n", 4},
		"negative cost":     {HistoryHeader + "\n" + "100,a,api,k1,-5\n", 2},
		"six fields":        {HistoryHeader + "\n" + "100,a,api,k1,1000,7\n" + good, 2},
		"empty replica":     {HistoryHeader + "\n" + "100,,api,k1,1000\n", 2},
		"blank middle line": {HistoryHeader + "\n" + good + "\n" + good, 3},
		"crlf":              {HistoryHeader + "\n" + "100,a,api,k1,1000\r\n", 2},
		"wrong header":      {"t,replica,policy,key,cost\n" + good, 1},
		"too long line":     {HistoryHeader + "\n" + strings.Repeat("9", maxLineBytes+10) + "\n", 2},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "history-ok.csv", HistoryHeader+"\n"+good)
			writeFile(t, dir, "history-x.csv", tc.content)
			_, err := ReadHistories(dir)
			if err == nil {
				t.Fatal("malformed history accepted")
			}
			want := fmt.Sprintf("history-x.csv:%d:", tc.wantLine)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		})
	}
}

func TestHistoryReadsLargeFile(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(HistoryHeader + "\n")
	const n = 100_000
	for i := range n {
		fmt.Fprintf(&b, "%d,r%d,api,k%d,1000\n", n-i, i%3, i%7)
	}
	writeFile(t, dir, "history-big.csv", b.String())
	recs, err := ReadHistories(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || recs[0].TMonoNanos != 1 || recs[n-1].TMonoNanos != n {
		t.Fatalf("got %d records, first %v last %v", len(recs), recs[0], recs[len(recs)-1])
	}
	// Interned: equal strings share storage.
	if a, c := recs[0].Replica, recs[3].Replica; a != c || unsafe.StringData(a) != unsafe.StringData(c) {
		t.Fatalf("replica strings not shared: %q %q", a, c)
	}
}

func TestTimelineRoundTripConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline.jsonl")
	w, err := NewTimelineWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if err := w.Emit(KindPhase, fmt.Sprintf("g%d", g), fmt.Sprintf("i=%d \"quoted\"\n", i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()

	// Everything emitted is on disk before Close.
	events, err := ReadTimeline(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != writers*each {
		t.Fatalf("read %d events, emitted %d", len(events), writers*each)
	}
	seen := map[string]bool{}
	for i, e := range events {
		if i > 0 && e.T < events[i-1].T {
			t.Fatalf("event %d at %d before event %d at %d", i, e.T, i-1, events[i-1].T)
		}
		seen[e.Name+"/"+e.Detail] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct events, want %d", len(seen), writers*each)
	}

	if err := w.EmitEvent(Event{T: 42, Kind: KindLeader, Name: "", Detail: "none"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Emit("nemesis-begin", "x", ""); err == nil {
		t.Fatal("unknown kind emitted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Emit(KindPhase, "end", ""); err == nil {
		t.Fatal("Emit after Close succeeded")
	}
	events, err = ReadTimeline(path)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last != (Event{T: 42, Kind: KindLeader, Name: "", Detail: "none"}) {
		t.Fatalf("last event %+v", last)
	}
}

func TestTimelineToleratesPartialLastLineOnly(t *testing.T) {
	dir := t.TempDir()
	ok := `{"t":1,"kind":"nemesis-start","name":"partition","detail":"n1|n2,n3"}` + "\n" +
		`{"t":2,"kind":"leader","name":"n2","detail":"","extra":"ignored"}` + "\n"
	p := writeFile(t, dir, "ok.jsonl", ok+`{"t":3,"kind":"nemesis-e`)
	events, err := ReadTimeline(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Name != "partition" || events[1].Name != "n2" {
		t.Fatalf("events %+v", events)
	}
	for name, bad := range map[string]string{
		"broken json":  ok + "{\"t\":3,\n" + ok,
		"unknown kind": ok + `{"t":3,"kind":"nemesis","name":"x","detail":""}` + "\n",
		"two objects":  ok + `{"t":3,"kind":"phase","name":"x","detail":""}{}` + "\n",
	} {
		p := writeFile(t, dir, "bad.jsonl", bad)
		if _, err := ReadTimeline(p); err == nil || !strings.Contains(err.Error(), "bad.jsonl:3:") {
			t.Errorf("%s: error %v, want one naming bad.jsonl:3", name, err)
		}
	}
}

func TestTimelineMonoNowAdvances(t *testing.T) {
	a := MonoNow()
	b := MonoNow()
	if a <= 0 || b < a {
		t.Fatalf("MonoNow went %d then %d", a, b)
	}
}

func TestReadHistoriesBracketed(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "history-a.csv", HistoryHeaderBracketed+"\n100,a,api,k1,500,130\n200,a,api,k1,500,200\n")
	recs, err := ReadHistories(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].TAfterNanos != 130 || recs[1].TAfterNanos != 200 {
		t.Fatalf("records %+v", recs)
	}
	writeFile(t, dir, "history-b.csv", HistoryHeaderBracketed+"\n100,b,api,k1,500,99\n100,b,api,k1,500,100\n")
	if _, err := ReadHistories(dir); err == nil || !strings.Contains(err.Error(), "history-b.csv:2") {
		t.Fatalf("an interval ending before it starts was accepted: %v", err)
	}
}

func TestReadGrants(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "grants-a.csv", grantsHeader+"\n100,a,p,k,7,false,5000,1000,2000\n200,a,p,k,7,true,6")
	g, err := readGrants(dir)
	if err != nil || len(g) != 1 || g[0].leaseID != 7 || g[0].deadline != 5000 {
		t.Fatalf("readGrants = %+v, %v; want one grant (the partial last line dropped)", g, err)
	}
	writeFile(t, dir, "grants-b.csv", grantsHeader+"\n100,b,p,k,x,false,5000,1000,2000\n100,b,p,k,1,false,5000,1000,2000\n")
	if _, err := readGrants(dir); err == nil || !strings.Contains(err.Error(), "grants-b.csv:2") {
		t.Fatalf("a malformed middle line was accepted: %v", err)
	}
}

// TestGrantCheckReleases: a lease missing after the restart is lost unless
// its holder's release of it may have been applied before the listing
// answered: sent before the kill (whatever its outcome), answered, or
// sent after the listing was asked for. A release sent during the outage
// that failed reached nobody, one sent after the answer came too late, and
// another replica's release of the same lease ID is not this one's.
func TestGrantCheckReleases(t *testing.T) {
	dir := t.TempDir()
	// Grants acknowledged before the kill (t=1000), usable past the query
	// (t=2000, answered at 2100); the listing has none of them.
	var grants string
	for id := 1; id <= 6; id++ {
		grants += fmt.Sprintf("100,a,p,k,%d,false,5000,0,2000\n", id)
	}
	writeFile(t, dir, "grants-a.csv", grantsHeader+"\n"+grants)
	writeFile(t, dir, "grants-b.csv", grantsHeader+"\n100,b,p,k,7,false,5000,0,2000\n")
	g := &grantCheck{killedAt: 1000, queriedAt: 2000, answeredAt: 2100, leases: map[string]map[uint64]bool{}}
	if r := g.verify(dir, ""); r.OK || !strings.Contains(r.Detail, "7 of 7") {
		t.Fatalf("no releases: %+v; want all lost", r)
	}
	writeFile(t, dir, "releases-a.csv", releasesHeader+"\n"+
		"600,a,p,k,1,0,500,false\n"+ // sent before the kill, failed: excused
		"1600,a,p,k,2,0,1500,false\n"+ // sent during the outage, failed: lost
		"1700,a,p,k,3,0,1500,true\n"+ // sent during the outage, answered: excused
		"2090,a,p,k,4,0,2050,false\n"+ // sent after the query, before its answer: excused
		"2300,a,p,k,5,0,2200,true\n"+ // sent after the answer: lost
		"1700,a,p,k,7,0,1500,true\n") // a's lease 7 is not b's: b's 7 lost
	r := g.verify(dir, "")
	for _, want := range []string{"4 of 7", "3 more released", "a lease 2 ", "a lease 5 ", "a lease 6 ", "b lease 7 "} {
		if !strings.Contains(r.Detail, want) {
			t.Fatalf("releases: %+v; want %q in the detail", r, want)
		}
	}
	if r.OK {
		t.Fatalf("releases: %+v passed", r)
	}
	// The lost ones listed: nothing lost, three excused.
	g.leases["a"] = map[uint64]bool{2: true, 5: true, 6: true}
	g.leases["b"] = map[uint64]bool{7: true}
	if r := g.verify(dir, ""); !r.OK || !strings.Contains(r.Detail, "3 more released") {
		t.Fatalf("the unreleased leases listed: %+v; want pass with three excused", r)
	}
	// Only released leases: nothing was checked, which is not a pass.
	only := t.TempDir()
	writeFile(t, only, "grants-a.csv", grantsHeader+"\n100,a,p,k,1,false,5000,0,2000\n")
	writeFile(t, only, "releases-a.csv", releasesHeader+"\n600,a,p,k,1,0,500,true\n")
	if r := (&grantCheck{killedAt: 1000, queriedAt: 2000, answeredAt: 2100}).verify(only, ""); r.OK || !strings.Contains(r.Detail, "nothing was checked") {
		t.Fatalf("every lease released: %+v; want nothing checked", r)
	}
	// Nothing to compare, and a reason to expect it (a window policy): a pass that says why.
	if r := (&grantCheck{killedAt: 1000, queriedAt: 2000, answeredAt: 2100}).verify(only, "why"); !r.OK || !strings.Contains(r.Detail, "nothing was checked (why)") {
		t.Fatalf("nothing to compare, expected: %+v", r)
	}
	writeFile(t, only, "releases-c.csv", releasesHeader+"\n1,c,p,k,x,0,1,true\n2,c,p,k,1,0,1,true\n")
	if r := (&grantCheck{}).verify(only, "why"); r.OK || !strings.Contains(r.Detail, "releases-c.csv:2") {
		t.Fatalf("a malformed release line: %+v", r)
	}
}
