package idemotel

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem"
)

// sweepMetrics are the instruments of the Sweeper's sweeps.
type sweepMetrics struct {
	deleted, runs metric.Int64Counter
	lastSuccess   atomic.Int64 // Unix nanoseconds of the last sweep that succeeded
}

func (s *sweepMetrics) init(m metric.Meter) error {
	err := makeCounters(m,
		counter{&s.deleted, "idem.sweep.deleted", "Expired records the sweeper deleted", "{record}"},
		counter{&s.runs, "idem.sweep.runs", "Sweeps, by result", "{sweep}"},
	)
	if err != nil {
		return err
	}
	last, err := m.Float64ObservableGauge("idem.sweep.last_success", metric.WithDescription("Unix time of the last sweep that succeeded"), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if t := s.lastSuccess.Load(); t != 0 {
			o.ObserveFloat64(last, float64(t)/1e9)
		}
		return nil
	}, last)
	return err
}

// ObserveSweep implements idem.SweepObserver: the idem.sweep.* metrics.
func (o *Observer) ObserveSweep(ctx context.Context, s idem.Sweep) {
	o.sweep.deleted.Add(ctx, int64(s.Deleted))
	result := "ok"
	if s.Err != nil {
		result = "error"
	} else {
		o.sweep.lastSuccess.Store(time.Now().UnixNano())
	}
	o.sweep.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("idem.result", result)))
}
