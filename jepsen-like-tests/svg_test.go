//go:build jepsen && linux

package jepsen

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// svgElement is one element of a rendered plot, by name and class.
type svgElement struct {
	name, class string
	attrs       map[string]string
}

func parseSVG(t *testing.T, data []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var out []svgElement
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, data)
		}
		if se, ok := tok.(xml.StartElement); ok {
			e := svgElement{name: se.Name.Local, attrs: map[string]string{}}
			for _, a := range se.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			e.class = e.attrs["class"]
			out = append(out, e)
		}
	}
}

func count(els []svgElement, name, class string) int {
	n := 0
	for _, e := range els {
		if e.name == name && e.class == class {
			n++
		}
	}
	return n
}

func svgFixture() (recs []Record, events []Event, start, end int64) {
	start = 1_000_000 * ms // CLOCK_MONOTONIC is far from 0
	end = start + 20_000*ms
	recs = steady("a", start, start+8_000*ms)
	recs = append(recs, steady("b", start+12_000*ms, end)...)
	recs = append(recs, Record{TMonoNanos: start + 12_000*ms, Replica: "b", CostMilli: 20_000})
	at := func(s int64) int64 { return start + s*ms }
	events = []Event{
		{T: at(0), Kind: KindLeader, Name: "n1"},
		{T: at(3000), Kind: KindNemesisStart, Name: "partition", Detail: "n1 | n2 n3 <&>"},
		{T: at(4000), Kind: KindLeader, Name: ""},
		{T: at(4500), Kind: KindLeader, Name: "n2"},
		{T: at(5000), Kind: KindNemesisStart, Name: "kill", Detail: "n3"},
		{T: at(7000), Kind: KindNemesisEnd, Name: "partition"},
		{T: at(8000), Kind: KindNemesisEnd, Name: "kill"},
		{T: at(9000), Kind: KindNemesisStart, Name: "partition", Detail: "again"},
		{T: at(11000), Kind: KindNemesisEnd, Name: "partition"},
		{T: at(12000), Kind: KindPhase, Name: "heal"},
		{T: at(15000), Kind: KindNemesisStart, Name: "clock-skew"}, // never ended
		{T: at(19000), Kind: KindPhase, Name: "end"},
	}
	return recs, events, start, end
}

func TestSVGRendersBandsAndLeaderMarkers(t *testing.T) {
	recs, events, start, end := svgFixture()
	var a, b bytes.Buffer
	if err := RenderSVG(&a, "partition & kill <run 7>", recs, events, 10_000, start, end); err != nil {
		t.Fatal(err)
	}
	// Same input in another order gives the same bytes.
	rev := make([]Event, len(events))
	for i, e := range events {
		rev[len(events)-1-i] = e
	}
	if err := RenderSVG(&b, "partition & kill <run 7>", recs, rev, 10_000, start, end); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two renderings of the same run differ")
	}

	els := parseSVG(t, a.Bytes())
	if els[0].name != "svg" {
		t.Fatalf("root element %q", els[0].name)
	}
	if n := count(els, "rect", "nemesis"); n != 4 {
		t.Errorf("%d nemesis bands, want 4 (partition twice, kill, unended clock-skew)", n)
	}
	if n := count(els, "line", "leader"); n != 3 {
		t.Errorf("%d leader markers, want 3", n)
	}
	if n := count(els, "line", "phase"); n != 2 {
		t.Errorf("%d phase markers, want 2", n)
	}
	if count(els, "polyline", "rate") != 1 || count(els, "line", "quota") != 1 || count(els, "text", "title") != 1 {
		t.Error("missing the rate line, the quota line or the title")
	}
	out := a.String()
	for _, want := range []string{"leader n1", "no leader", "leader n2", ">partition<", ">kill<",
		"clock-skew (unpaired)", "partition &amp; kill &lt;run 7&gt;", "quota r = 10/s", "seconds since start"} {
		if !strings.Contains(out, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if strings.Contains(out, "http") && strings.Count(out, "http") != 1 { // only the SVG namespace
		t.Error("plot references something external")
	}

	// The rate line has one point per 100 ms bin; the spike of 20 tokens
	// plus one in a bin is 210 tokens/s and sets the y scale.
	for _, e := range els {
		if e.class == "rate" {
			if n := len(strings.Fields(e.attrs["points"])); n != int((end-start)/int64(RateBin)) {
				t.Errorf("%d rate points, want %d", n, (end-start)/int64(RateBin))
			}
		}
	}
	if !strings.Contains(out, ">250<") && !strings.Contains(out, ">240<") {
		t.Errorf("y axis does not reach the 210 tokens/s spike")
	}
}

func TestSVGBandsFollowTheirIntervals(t *testing.T) {
	_, events, start, end := svgFixture()
	ivs := NemesisIntervals(events, start, end)
	type iv struct {
		name     string
		from, to int64
		open     bool
	}
	want := []iv{
		{"partition", 3000, 7000, false}, {"kill", 5000, 8000, false},
		{"partition", 9000, 11000, false}, {"clock-skew", 15000, 20000, true},
	}
	if len(ivs) != len(want) {
		t.Fatalf("intervals %+v", ivs)
	}
	for i, w := range want {
		g := ivs[i]
		if g.Name != w.name || g.FromNanos != start+w.from*ms || g.ToNanos != start+w.to*ms || g.Open != w.open {
			t.Errorf("interval %d = %+v, want %+v", i, g, w)
		}
	}
	// An end without a start runs from the start of the run.
	ivs = NemesisIntervals([]Event{{T: start + 5*ms, Kind: KindNemesisEnd, Name: "x"}}, start, end)
	if len(ivs) != 1 || ivs[0].FromNanos != start || !ivs[0].Open {
		t.Fatalf("orphan end: %+v", ivs)
	}
}

func TestSVGRejectsEmptyOrHugeSpans(t *testing.T) {
	if err := RenderSVG(io.Discard, "x", nil, nil, 1000, 10, 10); err == nil {
		t.Error("empty span rendered")
	}
	if err := RenderSVG(io.Discard, "x", nil, nil, 1000, 0, int64(1000*time.Hour)); err == nil {
		t.Error("1000 h of 100 ms bins rendered")
	}
	var buf bytes.Buffer
	if err := RenderSVG(&buf, "idle", nil, nil, 0, 0, int64(time.Second)); err != nil {
		t.Fatal(err)
	}
	parseSVG(t, buf.Bytes())
}
