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

// series is one line of a chart: a value per bucket, oldest first.
type series struct {
	Name, Class string
	Values      []float64
	Gauge       bool // a level: its total over the window is its largest value
}

// lineChart lays series out over the buckets starting at starts, the
// largest value at the top; label formats the top's value.
func lineChart(title string, starts []time.Time, ss []series, label func(float64) string) svgChart {
	c := svgChart{Title: title}
	if n := len(starts); n > 0 {
		c.From, c.To = starts[0].UTC().Format("15:04"), starts[n-1].UTC().Format("15:04")+" UTC"
	}
	var top float64
	for _, s := range ss {
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	c.Empty, c.Max = top == 0, label(top)
	for _, s := range ss {
		c.Series = append(c.Series, svgSeries{Name: s.Name, Class: s.Class, Points: points(s.Values, top)})
	}
	return c
}

func countLabel(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func chartsFor(s ScopeSeries) scopeCharts {
	sc := scopeCharts{Scope: s.Scope, Total: s.Total}
	n := len(s.Minutes)
	for i := n - 1; i >= 0 && i >= n-10; i-- {
		sc.Recent = append(sc.Recent, s.Minutes[i])
	}
	starts := make([]time.Time, n)
	for i, m := range s.Minutes {
		starts[i] = m.Start
	}
	col := func(v func(Minute) float64) []float64 {
		out := make([]float64, n)
		for i, m := range s.Minutes {
			out[i] = v(m)
		}
		return out
	}
	sc.Counts = lineChart("Messages per minute", starts, []series{
		{Name: "processed", Class: "s-processed", Values: col(func(m Minute) float64 { return float64(m.Processed) })},
		{Name: "duplicates", Class: "s-duplicate", Values: col(func(m Minute) float64 { return float64(m.Duplicates) })},
		{Name: "conflicts", Class: "s-conflict", Values: col(func(m Minute) float64 { return float64(m.Conflicts) })},
		{Name: "in-progress retries", Class: "s-inprogress", Values: col(func(m Minute) float64 { return float64(m.InProgress) })},
	}, countLabel)
	lat := func(v func(Minute) time.Duration) []float64 {
		return col(func(m Minute) float64 { return float64(v(m)) })
	}
	sc.Latency = lineChart("Latency per minute", starts, []series{
		{Name: "claim p50", Class: "s-claim50", Values: lat(func(m Minute) time.Duration { return m.ClaimP50 })},
		{Name: "claim p99", Class: "s-claim99", Values: lat(func(m Minute) time.Duration { return m.ClaimP99 })},
		{Name: "handler p50", Class: "s-handler50", Values: lat(func(m Minute) time.Duration { return m.HandlerP50 })},
		{Name: "handler p99", Class: "s-handler99", Values: lat(func(m Minute) time.Duration { return m.HandlerP99 })},
	}, func(v float64) string { return shortDur(time.Duration(v)) })
	return sc
}

// points lays the values out left to right, the largest value at the top.
func points(vs []float64, top float64) string {
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	w := float64(chartW - padLeft*2)
	h := float64(chartH - padTop - padBottom)
	for i, v := range vs {
		x := float64(padLeft)
		if len(vs) > 1 {
			x += w * float64(i) / float64(len(vs)-1)
		}
		y := float64(chartH - padBottom)
		if top > 0 {
			y -= h * v / top
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	return b.String()
}
