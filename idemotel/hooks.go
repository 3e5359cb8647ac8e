package idemotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem/broker"
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

// Hooks returns broker.Hooks that count what a consumer of package broker
// (and of every transport on it) reports, then call next's hooks, so a
// consumer's own hooks still run:
//
//	hooks, err := idemotel.Hooks(idemotel.Options{MeterProvider: mp}, myHooks)
//	opts := nats.Options{Options: broker.Options[jetstream.Msg]{Hooks: hooks}}
//
// Only Options.MeterProvider is read. Metrics (attribute idem.scope when
// the report's result has one):
//
//	idem.broker.settles        counter  deliveries settled, by idem.action (ack,
//	                                    retry, dead_letter) and idem.outcome: a
//	                                    retry with outcome in_progress is a
//	                                    delivery held MaxHold and handed back
//	idem.broker.dead_letters   counter  dead letters durable at the broker, by
//	                                    idem.reason (conflict, permanent,
//	                                    max_deliver, parked, invalid_data, ...)
//	idem.broker.action_errors  counter  failed broker actions (Report.BrokerErr:
//	                                    an ack, retry or dead letter refused, a
//	                                    lock lost), by idem.action
//	idem.broker.store_outages  counter  OutageError reports (at most one per
//	                                    broker.OutageReportEvery while the store
//	                                    cannot be reached): a store-error loop,
//	                                    by idem.scope
//	idem.broker.outage_held    counter  claims that met the outage (OutageError.Held),
//	                                    by idem.scope
//	idem.broker.errors         counter  every other error the consumer handled by
//	                                    itself (a failed action again, a fetch, a
//	                                    commit, a keep-alive, a reconnection)
func Hooks[M any](opts Options, next broker.Hooks[M]) (broker.Hooks[M], error) {
	m, err := newBrokerMetrics(opts.MeterProvider)
	if err != nil {
		return broker.Hooks[M]{}, err
	}
	return broker.Hooks[M]{
		BeforeSettle: next.BeforeSettle,
		AfterSettle: func(ctx context.Context, msg M, r broker.Report) {
			m.afterSettle(ctx, r)
			next.CallAfterSettle(ctx, msg, r)
		},
		OnDeadLetter: func(ctx context.Context, msg M, r broker.Report) {
			m.deadLetters.Add(ctx, 1, metric.WithAttributes(append(scopeOf(r), attribute.String("idem.reason", r.Reason))...))
			next.CallOnDeadLetter(ctx, msg, r)
		},
		OnError: func(err error) {
			m.onError(err)
			next.CallOnError(err)
		},
	}, nil
}

func newBrokerMetrics(mp metric.MeterProvider) (*brokerMetrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scopeName)
	m := &brokerMetrics{}
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
		unit       string
	}{
		{&m.settles, "idem.broker.settles", "Deliveries settled by broker action and idempotency outcome", "{delivery}"},
		{&m.deadLetters, "idem.broker.dead_letters", "Dead letters durable at the broker, by reason", "{message}"},
		{&m.actionErrs, "idem.broker.action_errors", "Broker actions (ack, retry, dead letter) that failed", "{error}"},
		{&m.outages, "idem.broker.store_outages", "Reports of deliveries held while the store cannot be reached", "{report}"},
		{&m.outageHeld, "idem.broker.outage_held", "Claims that met a store outage and were held", "{claim}"},
		{&m.errs, "idem.broker.errors", "Errors the consumer handled by itself (fetch, commit, keep-alive, ...)", "{error}"},
	} {
		var err error
		if *c.dst, err = meter.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.unit)); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// scopeOf is the report's scope attribute, none when its result has none
// (a message without a key may have no scope either).
func scopeOf(r broker.Report) []attribute.KeyValue {
	if r.Result.Key.Scope == "" {
		return nil
	}
	return []attribute.KeyValue{attribute.String("idem.scope", r.Result.Key.Scope)}
}

func (m *brokerMetrics) afterSettle(ctx context.Context, r broker.Report) {
	action := attribute.String("idem.action", r.Action.String())
	scope := scopeOf(r)
	m.settles.Add(ctx, 1, metric.WithAttributes(append(scope, action, attribute.String("idem.outcome", r.Result.Outcome.String()))...))
	if r.BrokerErr != nil {
		m.actionErrs.Add(ctx, 1, metric.WithAttributes(append(scope, action)...))
	}
}

func (m *brokerMetrics) onError(err error) {
	ctx := context.Background()
	if oe, ok := errors.AsType[*broker.OutageError](err); ok {
		var scope []attribute.KeyValue
		if oe.Scope != "" {
			scope = []attribute.KeyValue{attribute.String("idem.scope", oe.Scope)}
		}
		m.outages.Add(ctx, 1, metric.WithAttributes(scope...))
		m.outageHeld.Add(ctx, int64(oe.Held), metric.WithAttributes(scope...))
		return
	}
	m.errs.Add(ctx, 1)
}
