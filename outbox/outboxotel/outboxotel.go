// Package outboxotel reports an outbox's backlog, read from its store, as
// OpenTelemetry gauges. The relay's own events (messages published,
// failed and parked, batch lag and duration, errors, lease changes,
// cleanups) are idemotel's: the relay takes the guards' observer
// (outbox.RelayOptions.Observer), which idemotel.New implements.
//
//	gauges, err := outboxotel.NewGauges(outboxotel.Options{Stats: ob}) // ob: the outbox store
//	defer gauges.Close()
//
// Gauges (attribute outbox.name, Options.Name), read at each collection,
// from whichever instance collects (every instance sees the same table):
//
//	outbox.pending           gauge      records not yet confirmed, parked ones aside
//	outbox.parked            gauge      records waiting for an operator
//	outbox.lag               gauge      seconds since the oldest pending record was
//	                                    enqueued: how far the relay is behind
package outboxotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem/outbox"
)

// Options configure the gauges. Stats is required.
type Options struct {
	MeterProvider metric.MeterProvider // default otel.GetMeterProvider()
	// Name tells outboxes apart: the outbox.name attribute.
	Name string
	// Stats is read at each collection for the gauges.
	Stats outbox.Inspector
	// StatsTimeout bounds that read. Default 5s.
	StatsTimeout time.Duration
}

// Gauges are the registered gauges of one outbox.
type Gauges struct{ reg metric.Registration }

const scopeName = "github.com/idemgo/idem/outbox/outboxotel"

// NewGauges creates the gauges and registers their callback (Close
// unregisters it).
func NewGauges(opts Options) (*Gauges, error) {
	if opts.Stats == nil {
		return nil, errors.New("outboxotel: Options.Stats is required")
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if opts.StatsTimeout <= 0 {
		opts.StatsTimeout = 5 * time.Second
	}
	m := mp.Meter(scopeName)
	pending, err := m.Int64ObservableGauge("outbox.pending", metric.WithDescription("Records not yet confirmed by the broker, parked ones aside"), metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	parked, err := m.Int64ObservableGauge("outbox.parked", metric.WithDescription("Records parked for an operator"), metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	lag, err := m.Float64ObservableGauge("outbox.lag", metric.WithDescription("Age of the oldest pending record"), metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	attrs := metric.WithAttributes(attribute.String("outbox.name", opts.Name))
	reg, err := m.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, opts.StatsTimeout)
		defer cancel()
		now := time.Now()
		st, err := opts.Stats.Stats(ctx, now)
		if err != nil {
			return err
		}
		ob.ObserveInt64(pending, st.Pending, attrs)
		ob.ObserveInt64(parked, st.Parked, attrs)
		ob.ObserveFloat64(lag, st.Lag(now).Seconds(), attrs)
		return nil
	}, pending, parked, lag)
	if err != nil {
		return nil, err
	}
	return &Gauges{reg: reg}, nil
}

// Close unregisters the gauges' callback.
func (g *Gauges) Close() error { return g.reg.Unregister() }
