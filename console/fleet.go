package console

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// The fleet view: charts from what every process of a fleet shares, so a
// console run apart from the consumers (idem console) sees their work. The
// store counts its records over time (idem.ActivityCounter: claims,
// completions, releases per scope), and Prometheus, when configured, has
// the guards' own counts (processed, duplicates, conflicts, dead letters,
// held, stale), summed over every process that exports them.

// fleetData is one reading of the fleet's sources.
type fleetData struct {
	At       time.Time
	Took     time.Duration
	Step     time.Duration
	Store    bool // the store counts activity
	StoreErr string
	Prom     bool // Prometheus is configured
	PromErr  string
	Scopes   []fleetScope
}

// fleetScope is one scope's charts, from the store and from Prometheus.
type fleetScope struct {
	Scope string
	Store *fleetChart // nil: no records in the window, or no ActivityCounter
	Prom  *fleetChart // nil: no Prometheus, or no series for the scope
}

// fleetChart is a chart with its numbers: the window's totals per series,
// and the last buckets newest first for the table.
type fleetChart struct {
	Chart  svgChart
	Names  []string
	Totals []int64
	Recent []fleetRow
}

type fleetRow struct {
	Start  time.Time
	Values []int64
}

// storeSeries are the store's per-scope series, from ActivityBucket.
var storeSeries = []struct {
	Name, Class string
	V           func(idem.ActivityBucket) int64
}{
	{"completed", "s-processed", func(b idem.ActivityBucket) int64 { return b.Completed }},
	{"claimed", "s-claimed", func(b idem.ActivityBucket) int64 { return b.Claimed }},
	{"released (to retry)", "s-released", func(b idem.ActivityBucket) int64 { return b.Released }},
	{"retried (claimed again)", "s-inprogress", func(b idem.ActivityBucket) int64 { return b.Retried }},
}

// fleet keeps the last reading for at most maxAge: a reading is one grouped
// scan of the store and a few Prometheus queries, too much per view. An
// older reading is served while one new reading runs in the background
// (on the console's context, so Close ends it); only the first view waits.
type fleet struct {
	counter idem.ActivityCounter // nil: the store does not count activity
	prom    *promClient          // nil: no Prometheus
	promErr error                // Options.Prometheus was not a URL
	window  time.Duration
	step    time.Duration
	maxAge  time.Duration
	timeout time.Duration
	clock   func() time.Time
	base    context.Context // ends with Console.Close
	wg      sync.WaitGroup

	first   sync.Mutex // held by the view that takes the first reading
	mu      sync.Mutex
	last    *fleetData
	running bool
}

func (f *fleet) enabled() bool { return f.counter != nil || f.prom != nil || f.promErr != nil }

func (f *fleet) get(ctx context.Context) *fleetData {
	f.mu.Lock()
	last := f.last
	if last != nil && f.maxAge >= 0 && f.clock().Sub(last.At) >= f.maxAge && !f.running && f.base.Err() == nil {
		f.running = true
		f.wg.Add(1)
		go f.refresh()
	}
	f.mu.Unlock()
	if last != nil && f.maxAge >= 0 {
		return last
	}
	// The first reading (or every one, with a negative maxAge): in the
	// view, one at a time.
	f.first.Lock()
	defer f.first.Unlock()
	f.mu.Lock()
	last = f.last
	f.mu.Unlock()
	if last != nil && f.maxAge >= 0 {
		return last
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	d := f.read(ctx, f.clock())
	f.mu.Lock()
	f.last = d
	f.mu.Unlock()
	return d
}

func (f *fleet) refresh() {
	defer f.wg.Done()
	ctx, cancel := context.WithTimeout(f.base, f.timeout)
	defer cancel()
	d := f.read(ctx, f.clock())
	f.mu.Lock()
	f.last, f.running = d, false
	f.mu.Unlock()
}

func (f *fleet) read(ctx context.Context, now time.Time) *fleetData {
	start := time.Now()
	buckets := int(f.window / f.step)
	// The window ends with the bucket holding now.
	from := now.Truncate(f.step).Add(-f.step * time.Duration(buckets-1))
	starts := make([]time.Time, buckets)
	for i := range starts {
		starts[i] = from.Add(f.step * time.Duration(i))
	}
	d := &fleetData{At: now, Step: f.step, Store: f.counter != nil, Prom: f.prom != nil || f.promErr != nil}
	by := map[string]*fleetScope{}
	scope := func(name string) *fleetScope {
		s := by[name]
		if s == nil {
			s = &fleetScope{Scope: name}
			by[name] = s
		}
		return s
	}
	perMinute := fmt.Sprintf("per %s", shortStep(f.step))
	if f.counter != nil {
		acts, err := f.counter.Activity(ctx, idem.ActivityQuery{From: from, Step: f.step, Buckets: buckets})
		if err != nil {
			d.StoreErr = err.Error()
		}
		for _, a := range acts {
			ss := make([]series, len(storeSeries))
			for i, s := range storeSeries {
				ss[i] = series{Name: s.Name, Class: s.Class, Values: make([]float64, buckets)}
				for j, b := range a.Buckets {
					ss[i].Values[j] = float64(s.V(b))
				}
			}
			scope(a.Scope).Store = newFleetChart("Records "+perMinute+", from the store", starts, ss)
		}
	}
	if f.promErr != nil {
		d.PromErr = f.promErr.Error()
	}
	if f.prom != nil {
		got := make([]map[string][]float64, len(promSeries))
		for i, s := range promSeries {
			m, err := f.prom.queryRange(ctx, fmt.Sprintf(s.Query, promStep(f.step)), from, f.step, buckets)
			if err != nil {
				d.PromErr = err.Error()
				break
			}
			got[i] = m
		}
		if d.PromErr == "" {
			scopes := map[string]bool{}
			for _, m := range got {
				for sc := range m {
					scopes[sc] = true
				}
			}
			for sc := range scopes {
				ss := make([]series, len(promSeries))
				for i, s := range promSeries {
					v := got[i][sc]
					if v == nil {
						v = make([]float64, buckets)
					}
					ss[i] = series{Name: s.Name, Class: s.Class, Values: v, Gauge: s.Gauge}
				}
				scope(sc).Prom = newFleetChart("Messages "+perMinute+", from Prometheus (every process)", starts, ss)
			}
		}
	}
	for _, s := range by {
		d.Scopes = append(d.Scopes, *s)
	}
	sort.Slice(d.Scopes, func(i, j int) bool { return d.Scopes[i].Scope < d.Scopes[j].Scope })
	d.Took = time.Since(start)
	return d
}

func newFleetChart(title string, starts []time.Time, ss []series) *fleetChart {
	c := &fleetChart{Chart: lineChart(title, starts, ss, countLabel)}
	for _, s := range ss {
		var t float64
		for _, v := range s.Values {
			if s.Gauge {
				t = max(t, v)
			} else {
				t += v
			}
		}
		c.Names, c.Totals = append(c.Names, s.Name), append(c.Totals, int64(t+0.5))
	}
	for i := len(starts) - 1; i >= 0 && i >= len(starts)-10; i-- {
		row := fleetRow{Start: starts[i]}
		for _, s := range ss {
			row.Values = append(row.Values, int64(s.Values[i]+0.5))
		}
		c.Recent = append(c.Recent, row)
	}
	return c
}

// shortStep names a step: "minute", "5m".
func shortStep(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return shortDur(d)
}
