package bench

import (
	"testing"
	"time"
)

func TestHistQuantiles(t *testing.T) {
	var a, b hist
	// 1..1000µs, split over two histograms that are then merged.
	for i := 1; i <= 1000; i++ {
		if i%2 == 0 {
			a.add(time.Duration(i) * time.Microsecond)
		} else {
			b.add(time.Duration(i) * time.Microsecond)
		}
	}
	a.merge(&b)
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond} {
		got := a.quantile(q)
		if got < want*97/100 || got > want*103/100 {
			t.Errorf("p%v = %v, want %v ± 3%%", q*100, got, want)
		}
	}
	var empty hist
	if empty.quantile(0.5) != 0 {
		t.Error("empty histogram has a median")
	}
	var tiny hist
	tiny.add(time.Nanosecond)
	tiny.add(time.Hour * 1000)
	if tiny.quantile(0) > minLatency*2 || tiny.quantile(1) < time.Minute {
		t.Errorf("out-of-range samples: %v %v", tiny.quantile(0), tiny.quantile(1))
	}
}
