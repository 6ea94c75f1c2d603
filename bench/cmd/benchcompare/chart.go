package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// writeChart draws decision latency (p50 dotted, p99 solid) against the
// number of concurrent callers for every system, on log scales, as SVG.
func writeChart(path string, rows []decisionRow) error {
	const (
		width, height                 = 820, 500
		left, right, top, bot         = 80, 230, 40, 60
		minExp, maxExp        float64 = 1, 9 // 10 ns .. 1 s
	)
	callers := callersOf(rows)
	var systems []string
	for _, d := range rows {
		if !contains(systems, d.System) {
			systems = append(systems, d.System)
		}
	}
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"}
	pw, ph := float64(width-left-right), float64(height-top-bot)
	x := func(c int) float64 {
		lo, hi := math.Log2(float64(callers[0])), math.Log2(float64(callers[len(callers)-1]))
		if hi == lo {
			return float64(left) + pw/2
		}
		return float64(left) + pw*(math.Log2(float64(c))-lo)/(hi-lo)
	}
	y := func(ns float64) float64 {
		e := math.Log10(math.Max(ns, 1))
		e = math.Min(math.Max(e, minExp), maxExp)
		return float64(top) + ph*(1-(e-minExp)/(maxExp-minExp))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">Decision latency vs concurrent callers (p99 solid, p50 dotted)</text>`+"\n", left)
	labels := []string{"10 ns", "100 ns", "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s"}
	for i, l := range labels {
		yy := y(math.Pow(10, minExp+float64(i)))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, width-right, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, l)
	}
	for _, c := range callers {
		xx := x(c)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xx, top, xx, height-bot)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", xx, height-bot+18, c)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">concurrent callers (log scale)</text>`+"\n", float64(left)+pw/2, height-18)
	fmt.Fprintf(&b, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">latency per decision (log scale)</text>`+"\n", float64(top)+ph/2)
	for k, s := range systems {
		col := colors[k%len(colors)]
		for _, q := range []struct {
			get  func(d decisionRow) float64
			dash string
		}{{func(d decisionRow) float64 { return d.P99Nanos }, ""}, {func(d decisionRow) float64 { return d.P50Nanos }, ` stroke-dasharray="2,4"`}} {
			var pts []string
			for _, c := range callers {
				if d := find(rows, s, c); d != nil {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c), y(q.get(*d))))
				}
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, q.dash, strings.Join(pts, " "))
		}
		for _, c := range callers {
			if d := find(rows, s, c); d != nil {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x(c), y(d.P99Nanos), col)
			}
		}
		ly := top + 10 + 22*k
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", width-right+15, ly, width-right+40, ly, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", width-right+46, ly+4, escape(s))
	}
	b.WriteString("</svg>\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
