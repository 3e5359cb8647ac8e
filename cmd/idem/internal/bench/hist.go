package bench

import (
	"math"
	"time"
)

// hist is a log-bucketed latency histogram: bucket i holds durations near
// minLatency·growth^i, so percentiles are within 2% at any scale without
// keeping every sample (a memory store does millions of operations a second).
type hist struct {
	counts [buckets]int64
	n      int64
}

const (
	buckets    = 1100
	growth     = 1.02
	minLatency = 100 * time.Nanosecond
)

var logGrowth = math.Log(growth)

func (h *hist) add(d time.Duration) {
	i := 0
	if d > minLatency {
		i = int(math.Log(float64(d)/float64(minLatency)) / logGrowth)
	}
	h.counts[min(i, buckets-1)]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the duration below which q of the samples fall.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(float64(minLatency) * math.Pow(growth, float64(i)+0.5))
		}
	}
	return time.Duration(float64(minLatency) * math.Pow(growth, buckets))
}
