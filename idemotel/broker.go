package idemotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem"
)

// brokerMetrics are the instruments of the consumer engine's reports.
type brokerMetrics struct {
	settles     metric.Int64Counter
	deadLetters metric.Int64Counter
	actionErrs  metric.Int64Counter
	outages     metric.Int64Counter
	outageHeld  metric.Int64Counter
	errs        metric.Int64Counter
}

func (b *brokerMetrics) init(m metric.Meter) error {
	return makeCounters(m,
		counter{&b.settles, "idem.broker.settles", "Deliveries settled by broker action and idempotency outcome", "{delivery}"},
		counter{&b.deadLetters, "idem.broker.dead_letters", "Dead letters durable at the broker, by reason", "{message}"},
		counter{&b.actionErrs, "idem.broker.action_errors", "Broker actions (ack, retry, dead letter) that failed", "{error}"},
		counter{&b.outages, "idem.broker.store_outages", "Reports of deliveries held while the store cannot be reached", "{report}"},
		counter{&b.outageHeld, "idem.broker.outage_held", "Claims that met a store outage and were held", "{claim}"},
		counter{&b.errs, "idem.broker.errors", "Errors the consumer handled by itself (fetch, commit, keep-alive, ...)", "{error}"},
	)
}

// scopeAttr is the idem.scope attribute, none for an empty scope (a
// message without a key may have none).
func scopeAttr(scope string) []attribute.KeyValue {
	if scope == "" {
		return nil
	}
	return []attribute.KeyValue{attribute.String("idem.scope", scope)}
}

// ObserveSettlement implements idem.SettlementObserver: a delivery settled
// (idem.broker.settles), a dead letter (idem.broker.dead_letters), a
// failed broker action (idem.broker.action_errors).
func (o *Observer) ObserveSettlement(ctx context.Context, s idem.Settlement) {
	action := attribute.String("idem.action", s.Action.String())
	scope := scopeAttr(s.Result.Key.Scope)
	o.broker.settles.Add(ctx, 1, metric.WithAttributes(append(scope, action, attribute.String("idem.outcome", s.Result.Outcome.String()))...))
	if s.DeadLettered {
		o.broker.deadLetters.Add(ctx, 1, metric.WithAttributes(append(scope, attribute.String("idem.reason", s.Reason))...))
	}
	if s.BrokerErr != nil {
		o.broker.actionErrs.Add(ctx, 1, metric.WithAttributes(append(scope, action)...))
	}
}

// ObserveOutage implements idem.OutageObserver: idem.broker.store_outages
// and idem.broker.outage_held, by idem.scope.
func (o *Observer) ObserveOutage(ctx context.Context, out idem.Outage) {
	scope := metric.WithAttributes(scopeAttr(out.Scope)...)
	o.broker.outages.Add(ctx, 1, scope)
	o.broker.outageHeld.Add(ctx, int64(out.Held), scope)
}

// ObserveError implements idem.ErrorObserver: idem.broker.errors for the
// consumer's, outbox.errors for the relay's.
func (o *Observer) ObserveError(ctx context.Context, e idem.HandledError) {
	if e.Component == "outbox" {
		o.relay.errors.Add(ctx, 1)
		return
	}
	o.broker.errs.Add(ctx, 1, metric.WithAttributes(scopeAttr(e.Scope)...))
}
