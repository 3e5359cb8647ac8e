package idemotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem"
)

// relayMetrics are the instruments of the outbox relay's events.
type relayMetrics struct {
	messages metric.Int64Counter
	lag      metric.Float64Histogram
	duration metric.Float64Histogram
	errors   metric.Int64Counter
	lease    metric.Int64Counter
	deleted  metric.Int64Counter
}

func (r *relayMetrics) init(m metric.Meter) error {
	err := makeCounters(m,
		counter{&r.messages, "outbox.messages", "Records the relay handled, by result", "{message}"},
		counter{&r.errors, "outbox.errors", "Store and listener failures the relay retries", "{error}"},
		counter{&r.lease, "outbox.lease.changes", "Relay lease acquired, lost or released by this instance", "{change}"},
		counter{&r.deleted, "outbox.cleanup.deleted", "Published records deleted after the retention", "{message}"},
	)
	if err != nil {
		return err
	}
	buckets := metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	if r.lag, err = m.Float64Histogram("outbox.batch.lag", metric.WithDescription("From a batch's oldest record's enqueue to the broker's confirmation"), metric.WithUnit("s"), buckets); err != nil {
		return err
	}
	r.duration, err = m.Float64Histogram("outbox.batch.duration", metric.WithDescription("Time per batch: fetch, publish, marks"), metric.WithUnit("s"), buckets)
	return err
}

var leaseChanges = map[idem.RelayEventKind]string{
	idem.RelayLeaseAcquired: "acquired", idem.RelayLeaseLost: "lost", idem.RelayLeaseReleased: "released",
}

// ObserveRelay implements idem.RelayObserver: the outbox.* metrics.
func (o *Observer) ObserveRelay(ctx context.Context, e idem.RelayEvent) {
	r := &o.relay
	switch e.Kind {
	case idem.RelayBatch:
		for _, n := range []struct {
			result string
			n      int
		}{{"published", e.Published}, {"failed", e.Failed}, {"parked", e.Parked}} {
			if n.n > 0 {
				r.messages.Add(ctx, int64(n.n), metric.WithAttributes(attribute.String("outbox.result", n.result)))
			}
		}
		if e.Published > 0 {
			r.lag.Record(ctx, e.Lag.Seconds())
		}
		r.duration.Record(ctx, e.Duration.Seconds())
	case idem.RelayLeaseAcquired, idem.RelayLeaseLost, idem.RelayLeaseReleased:
		r.lease.Add(ctx, 1, metric.WithAttributes(attribute.String("outbox.lease", leaseChanges[e.Kind])))
	case idem.RelayCleanup:
		r.deleted.Add(ctx, int64(e.Deleted))
	}
}
