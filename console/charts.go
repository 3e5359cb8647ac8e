package console

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Charts are inline SVG drawn on the server: no script draws them, and the
// numbers behind each are in a table beside it for screen readers and for
// those who would rather read.

type scopeCharts struct {
	Scope   string
	Total   Minute
	Counts  svgChart
	Latency svgChart
	Recent  []Minute // the last minutes, newest first, for the table
}

type svgChart struct {
	Title    string
	Max      string // the top of the y axis, as a label
	From, To string // the x axis's ends
	Series   []svgSeries
	Empty    bool
}

type svgSeries struct {
	Name   string
	Class  string // the CSS class giving its colour and dash
	Points string // SVG polyline points
}

const (
	chartW, chartH = 600, 150
	padLeft        = 6
	padTop         = 8
	padBottom      = 6
)

func chartsFor(s ScopeSeries) scopeCharts {
	sc := scopeCharts{Scope: s.Scope, Total: s.Total}
	n := len(s.Minutes)
	for i := n - 1; i >= 0 && i >= n-10; i-- {
		sc.Recent = append(sc.Recent, s.Minutes[i])
	}
	from, to := "", ""
	if n > 0 {
		from, to = s.Minutes[0].Start.Format("15:04"), s.Minutes[n-1].Start.Format("15:04")+" UTC"
	}
	counts := []struct {
		name, class string
		v           func(Minute) float64
	}{
		{"processed", "s-processed", func(m Minute) float64 { return float64(m.Processed) }},
		{"duplicates", "s-duplicate", func(m Minute) float64 { return float64(m.Duplicates) }},
		{"conflicts", "s-conflict", func(m Minute) float64 { return float64(m.Conflicts) }},
		{"in-progress retries", "s-inprogress", func(m Minute) float64 { return float64(m.InProgress) }},
	}
	sc.Counts = svgChart{Title: "Messages per minute", From: from, To: to}
	var maxC float64
	for _, m := range s.Minutes {
		for _, c := range counts {
			maxC = max(maxC, c.v(m))
		}
	}
	sc.Counts.Empty = maxC == 0
	sc.Counts.Max = strconv.FormatFloat(maxC, 'f', 0, 64)
	for _, c := range counts {
		sc.Counts.Series = append(sc.Counts.Series, svgSeries{Name: c.name, Class: c.class, Points: points(s.Minutes, c.v, maxC)})
	}
	lat := []struct {
		name, class string
		v           func(Minute) time.Duration
	}{
		{"claim p50", "s-claim50", func(m Minute) time.Duration { return m.ClaimP50 }},
		{"claim p99", "s-claim99", func(m Minute) time.Duration { return m.ClaimP99 }},
		{"handler p50", "s-handler50", func(m Minute) time.Duration { return m.HandlerP50 }},
		{"handler p99", "s-handler99", func(m Minute) time.Duration { return m.HandlerP99 }},
	}
	var maxL time.Duration
	for _, m := range s.Minutes {
		for _, l := range lat {
			maxL = max(maxL, l.v(m))
		}
	}
	sc.Latency = svgChart{Title: "Latency per minute", From: from, To: to, Empty: maxL == 0, Max: shortDur(maxL)}
	for _, l := range lat {
		v := func(m Minute) float64 { return float64(l.v(m)) }
		sc.Latency.Series = append(sc.Latency.Series, svgSeries{Name: l.name, Class: l.class, Points: points(s.Minutes, v, float64(maxL))})
	}
	return sc
}

// points lays the minutes out left to right, the largest value at the top.
func points(ms []Minute, v func(Minute) float64, top float64) string {
	if len(ms) == 0 {
		return ""
	}
	var b strings.Builder
	w := float64(chartW - padLeft*2)
	h := float64(chartH - padTop - padBottom)
	for i, m := range ms {
		x := float64(padLeft)
		if len(ms) > 1 {
			x += w * float64(i) / float64(len(ms)-1)
		}
		y := float64(chartH - padBottom)
		if top > 0 {
			y -= h * v(m) / top
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	return b.String()
}
