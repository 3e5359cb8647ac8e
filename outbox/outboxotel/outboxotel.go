// Package outboxotel reports a relay's events as OpenTelemetry metrics. It
// plugs into the relay through the outbox.Observer hook:
//
//	obs, err := outboxotel.New(outboxotel.Options{Stats: ob}) // ob: the outbox store
//	relay, err := outbox.NewRelay(ob, pub, outbox.RelayOptions{Observer: obs})
//	defer obs.Close()
//
// Metrics (attribute outbox.name, Options.Name):
//
//	outbox.messages          counter    records the relay handled, by outbox.result:
//	                                    published, failed (retried), parked (alert)
//	outbox.batch.lag         histogram  seconds from a batch's oldest record's enqueue
//	                                    to the broker's confirmation
//	outbox.batch.duration    histogram  seconds per batch: fetch, publish, marks
//	outbox.errors            counter    store and listener failures the relay retries
//	outbox.lease.changes     counter    by outbox.lease: acquired, lost, released
//	outbox.cleanup.deleted   counter    published records deleted after the retention
//
// With Options.Stats (the store's outbox.Inspector), gauges read at each
// collection, from whichever instance collects (every instance sees the
// same table):
//
//	outbox.pending           gauge      records not yet confirmed, parked ones aside
//	outbox.parked            gauge      records waiting for an operator
//	outbox.lag               gauge      seconds since the oldest pending record was
//	                                    enqueued: how far the relay is behind
package outboxotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem/outbox"
)

// Options configure the observer. The zero value uses the global meter
// provider and no gauges.
type Options struct {
	MeterProvider metric.MeterProvider // default otel.GetMeterProvider()
	// Name tells outboxes apart: the outbox.name attribute.
	Name string
	// Stats, if set, is read at each collection for the gauges.
	Stats outbox.Inspector
	// StatsTimeout bounds that read. Default 5s.
	StatsTimeout time.Duration
}

// Observer is an outbox.Observer that records metrics.
type Observer struct {
	name     attribute.KeyValue
	messages metric.Int64Counter
	lag      metric.Float64Histogram
	duration metric.Float64Histogram
	errors   metric.Int64Counter
	lease    metric.Int64Counter
	deleted  metric.Int64Counter
	reg      metric.Registration
}

var _ outbox.Observer = (*Observer)(nil)

const scopeName = "github.com/idemgo/idem/outbox/outboxotel"

// New creates the instruments (and, with Options.Stats, registers the
// gauges' callback; Close unregisters it).
func New(opts Options) (*Observer, error) {
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if opts.StatsTimeout <= 0 {
		opts.StatsTimeout = 5 * time.Second
	}
	m := mp.Meter(scopeName)
	o := &Observer{name: attribute.String("outbox.name", opts.Name)}
	var err error
	if o.messages, err = m.Int64Counter("outbox.messages", metric.WithDescription("Records the relay handled, by result"), metric.WithUnit("{message}")); err != nil {
		return nil, err
	}
	buckets := metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	if o.lag, err = m.Float64Histogram("outbox.batch.lag", metric.WithDescription("From a batch's oldest record's enqueue to the broker's confirmation"), metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if o.duration, err = m.Float64Histogram("outbox.batch.duration", metric.WithDescription("Time per batch: fetch, publish, marks"), metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if o.errors, err = m.Int64Counter("outbox.errors", metric.WithDescription("Store and listener failures the relay retries"), metric.WithUnit("{error}")); err != nil {
		return nil, err
	}
	if o.lease, err = m.Int64Counter("outbox.lease.changes", metric.WithDescription("Relay lease acquired, lost or released by this instance"), metric.WithUnit("{change}")); err != nil {
		return nil, err
	}
	if o.deleted, err = m.Int64Counter("outbox.cleanup.deleted", metric.WithDescription("Published records deleted after the retention"), metric.WithUnit("{message}")); err != nil {
		return nil, err
	}
	if opts.Stats == nil {
		return o, nil
	}
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
	attrs := metric.WithAttributes(o.name)
	o.reg, err = m.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
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
	return o, nil
}

// Observe implements outbox.Observer.
func (o *Observer) Observe(ctx context.Context, e outbox.Event) {
	switch e.Kind {
	case outbox.EventBatch:
		for _, r := range []struct {
			result string
			n      int
		}{{"published", e.Published}, {"failed", e.Failed}, {"parked", e.Parked}} {
			if r.n > 0 {
				o.messages.Add(ctx, int64(r.n), metric.WithAttributes(o.name, attribute.String("outbox.result", r.result)))
			}
		}
		attrs := metric.WithAttributes(o.name)
		if e.Published > 0 {
			o.lag.Record(ctx, e.Lag.Seconds(), attrs)
		}
		o.duration.Record(ctx, e.Duration.Seconds(), attrs)
	case outbox.EventError:
		o.errors.Add(ctx, 1, metric.WithAttributes(o.name))
	case outbox.EventLeaseAcquired, outbox.EventLeaseLost, outbox.EventLeaseReleased:
		change := "acquired"
		switch e.Kind {
		case outbox.EventLeaseLost:
			change = "lost"
		case outbox.EventLeaseReleased:
			change = "released"
		}
		o.lease.Add(ctx, 1, metric.WithAttributes(o.name, attribute.String("outbox.lease", change)))
	case outbox.EventCleanup:
		o.deleted.Add(ctx, int64(e.Deleted), metric.WithAttributes(o.name))
	}
}

// Close unregisters the gauges' callback.
func (o *Observer) Close() error {
	if o.reg == nil {
		return nil
	}
	return o.reg.Unregister()
}
