//go:build jepsen && linux

package jepsen

// RenderSVG draws a run for a human: admitted rate against the quota, with
// the faults and leader changes on the same time axis, so "the rate spiked
// while the partition was in force" is visible at a glance. It is plain SVG
// written by hand (no plotting tools on the test hosts), and deterministic:
// the same input gives the same bytes, so plots can be diffed.
//
// Elements carry classes a test or a stylesheet can find: "rate" (the
// polyline), "quota", "nemesis" (one rect per interval), "leader" and
// "phase" (one line per event).

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RateBin is the width of the bins the rate line is drawn from.
const RateBin = 100 * time.Millisecond

// maxBins stops a start time of 0 (instead of a CLOCK_MONOTONIC reading)
// from allocating days of bins.
const maxBins = 1_000_000

// Plot geometry, in SVG user units.
const (
	svgWidth, svgHeight                  = 960, 420
	padLeft, padRight, padTop, padBottom = 70, 20, 60, 50
	plotW                                = svgWidth - padLeft - padRight
	plotH                                = svgHeight - padTop - padBottom
)

// Band colours, assigned to nemesis names in sorted order.
var nemesisPalette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// NemesisInterval is one fault, from its nemesis-start to the matching
// nemesis-end.
type NemesisInterval struct {
	Name               string
	FromNanos, ToNanos int64
	Detail             string // of the start event
	Open               bool   // no end (or no start) was recorded; clipped to the run
}

// NemesisIntervals pairs each nemesis-start with the next nemesis-end of the
// same name (first in, first out, so overlapping runs of one nemesis pair
// in order). A start with no end runs to end; an end with no start runs
// from start. Sorted by start time, then name.
func NemesisIntervals(events []Event, start, end int64) []NemesisInterval {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	open := map[string][]Event{}
	var out []NemesisInterval
	for _, e := range evs {
		switch e.Kind {
		case KindNemesisStart:
			open[e.Name] = append(open[e.Name], e)
		case KindNemesisEnd:
			if q := open[e.Name]; len(q) > 0 {
				out = append(out, NemesisInterval{Name: e.Name, FromNanos: q[0].T, ToNanos: e.T, Detail: q[0].Detail})
				open[e.Name] = q[1:]
			} else {
				out = append(out, NemesisInterval{Name: e.Name, FromNanos: start, ToNanos: e.T, Detail: e.Detail, Open: true})
			}
		}
	}
	for _, q := range open {
		for _, s := range q {
			out = append(out, NemesisInterval{Name: s.Name, FromNanos: s.T, ToNanos: max(end, s.T), Detail: s.Detail, Open: true})
		}
	}
	slices.SortStableFunc(out, func(a, b NemesisInterval) int {
		return cmp.Or(cmp.Compare(a.FromNanos, b.FromNanos), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ToNanos, b.ToNanos))
	})
	return out
}

// RenderSVG writes a self-contained SVG of the run [start, end] to w: the
// admitted rate in tokens/s over RateBin bins, the quota r, nemesis
// intervals as labelled translucent bands, and leader changes and phases as
// labelled vertical lines.
func RenderSVG(w io.Writer, title string, recs []Record, events []Event, rateMilliPerSec int64, start, end int64) error {
	if end <= start {
		return fmt.Errorf("render %q: empty run [%d, %d]", title, start, end)
	}
	span := float64(end - start)
	xOf := func(t int64) float64 {
		t = min(max(t, start), end)
		return padLeft + float64(t-start)/span*plotW
	}

	// Rate: milli-tokens per bin → tokens/s.
	nbinsTotal := (end - start + int64(RateBin) - 1) / int64(RateBin)
	if nbinsTotal > maxBins {
		return fmt.Errorf("render %q: run of %v is over %d bins of %v", title, time.Duration(end-start), maxBins, RateBin)
	}
	nbins := int(nbinsTotal)
	bins := make([]int64, nbins)
	for _, r := range recs {
		if r.TMonoNanos >= start && r.TMonoNanos < end {
			bins[(r.TMonoNanos-start)/int64(RateBin)] += r.CostMilli
		}
	}
	perSec := float64(time.Second) / float64(RateBin) / 1000
	quota := float64(rateMilliPerSec) / 1000
	peak := quota
	for _, b := range bins {
		peak = max(peak, float64(b)*perSec)
	}
	yStep := niceStep(peak*1.1, 5)
	yMax := math.Ceil(peak*1.1/yStep) * yStep
	if yMax <= 0 {
		yStep, yMax = 1, 1
	}
	yOf := func(v float64) float64 { return padTop + plotH - v/yMax*plotH }

	var s svgBuilder
	s.f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	s.f(`<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", svgWidth, svgHeight)
	s.f(`<text class="title" x="%d" y="20" text-anchor="middle" font-size="15">%s</text>`+"\n", svgWidth/2, esc(title))

	// Nemesis bands under everything else.
	intervals := NemesisIntervals(events, start, end)
	colour := nemesisColours(intervals)
	for i, iv := range intervals {
		x0, x1 := xOf(iv.FromNanos), xOf(iv.ToNanos)
		label := iv.Name
		if iv.Open {
			label += " (unpaired)"
		}
		s.f(`<rect class="nemesis" x="%s" y="%d" width="%s" height="%d" fill="%s" fill-opacity="0.18"><title>%s</title></rect>`+"\n",
			num(x0), padTop, num(max(x1-x0, 0.5)), plotH, colour[iv.Name], esc(label+": "+iv.Detail))
		s.f(`<text class="nemesis-label" x="%s" y="%d" fill="%s">%s</text>`+"\n",
			num(x0+2), padTop+12+12*(i%3), colour[iv.Name], esc(label))
	}

	// Axes, grid and ticks.
	s.f(`<g class="axes" stroke="#444" stroke-width="1">` + "\n")
	s.f(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", padLeft, padTop+plotH, padLeft+plotW, padTop+plotH)
	s.f(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", padLeft, padTop, padLeft, padTop+plotH)
	s.f("</g>\n")
	secs := span / float64(time.Second)
	xStep := niceStep(secs, 10)
	for i := 0; float64(i)*xStep <= secs+1e-9; i++ {
		v := float64(i) * xStep
		x := padLeft + v/secs*plotW
		s.f(`<line class="tick" x1="%s" y1="%d" x2="%s" y2="%d" stroke="#444"/>`+"\n", num(x), padTop+plotH, num(x), padTop+plotH+5)
		s.f(`<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(x), padTop+plotH+18, tickLabel(v, xStep))
	}
	for i := 0; float64(i)*yStep <= yMax+1e-9; i++ {
		v := float64(i) * yStep
		y := yOf(v)
		s.f(`<line class="grid" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#ddd"/>`+"\n", padLeft, num(y), padLeft+plotW, num(y))
		s.f(`<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", padLeft-6, num(y), tickLabel(v, yStep))
	}
	s.f(`<text x="%d" y="%d" text-anchor="middle">seconds since start</text>`+"\n", padLeft+plotW/2, svgHeight-10)
	s.f(`<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">admitted tokens/s (%v bins)</text>`+"\n",
		padTop+plotH/2, padTop+plotH/2, RateBin)

	// The quota r.
	s.f(`<line class="quota" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#d62728" stroke-width="1.5"/>`+"\n",
		padLeft, num(yOf(quota)), padLeft+plotW, num(yOf(quota)))
	s.f(`<text class="quota-label" x="%d" y="%s" text-anchor="end" fill="#d62728">quota r = %s/s</text>`+"\n",
		padLeft+plotW-4, num(yOf(quota)-4), strconv.FormatFloat(quota, 'f', -1, 64))

	// The rate, one point per bin at its middle, drawn over the quota.
	var pts strings.Builder
	for i, b := range bins {
		mid := start + int64(i)*int64(RateBin) + int64(RateBin)/2
		if i > 0 {
			pts.WriteByte(' ')
		}
		pts.WriteString(num(xOf(mid)) + "," + num(yOf(float64(b)*perSec)))
	}
	s.f(`<polyline class="rate" fill="none" stroke="#222" stroke-width="1.2" points="%s"/>`+"\n", pts.String())

	// Leader changes and phases, in time order.
	marks := 0
	for _, e := range sortedByTime(events) {
		if e.T < start || e.T > end {
			continue
		}
		var class, stroke, dash, label string
		switch e.Kind {
		case KindLeader:
			class, stroke, label = "leader", "#7f7f7f", "leader "+e.Name
			if e.Name == "" {
				label = "no leader"
			}
		case KindPhase:
			class, stroke, dash, label = "phase", "#2f4f4f", ` stroke-dasharray="4 3"`, e.Name
		default:
			continue
		}
		x := xOf(e.T)
		s.f(`<line class="%s" x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-width="0.8"%s><title>%s</title></line>`+"\n",
			class, num(x), padTop-14, num(x), padTop+plotH, stroke, dash, esc(label+": "+e.Detail))
		s.f(`<text class="%s-label" x="%s" y="%d" font-size="9" fill="%s">%s</text>`+"\n",
			class, num(x+2), padTop-16-10*(marks%2), stroke, esc(label))
		marks++
	}
	s.f("</svg>\n")
	_, err := io.WriteString(w, s.String())
	return err
}

func sortedByTime(events []Event) []Event {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	return evs
}

func nemesisColours(intervals []NemesisInterval) map[string]string {
	var names []string
	for _, iv := range intervals {
		names = append(names, iv.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := map[string]string{}
	for i, n := range names {
		out[n] = nemesisPalette[i%len(nemesisPalette)]
	}
	return out
}

// niceStep is a 1, 2 or 5 × 10^k step giving about target ticks over span.
func niceStep(span float64, target int) float64 {
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(target)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// tickLabel prints v with as many decimals as step needs.
func tickLabel(v, step float64) string {
	dec := max(0, int(-math.Floor(math.Log10(step))))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// num prints a coordinate to 0.1 units: enough for the eye, and stable.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

type svgBuilder struct{ strings.Builder }

func (b *svgBuilder) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }
