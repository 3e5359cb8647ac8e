// Package idemotel reports idem's facts as OpenTelemetry metrics and
// spans. New returns one observer that implements the whole vocabulary
// (idem.FullObserver): set it once as the guard's observer, and the
// consumer engine of package broker reports to it as well; give it too to
// the outbox relay (RelayOptions.Observer) and the Sweeper:
//
//	obs, err := idemotel.New(idemotel.Options{}) // global providers by default
//	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: obs})
//	relay, err := outbox.NewRelay(ob, pub, outbox.RelayOptions{Observer: obs})
//	sw := idem.Sweeper{Store: store, Observer: obs}
//
// Metrics (attributes idem.scope, idem.outcome, idem.mode):
//
//	idem.messages          counter    one per message, by outcome: watch
//	                                  duplicate (redeliveries absorbed), conflict
//	                                  and stale (dead-lettered: alert on them),
//	                                  failed, lease_lost, store_error
//	idem.claim.duration    histogram  seconds spent claiming at the store
//	idem.handler.duration  histogram  seconds in the user's handler
//	idem.duration          histogram  seconds for the whole call
//
//	idem.step.errors       counter    failed renewals and releases (attribute
//	                                  idem.step): a rising rate means the store
//	                                  struggles while handlers run
//
// The consumer engine's reports (package broker, every adapter on it;
// attribute idem.scope, the guard's):
//
//	idem.broker.settles        counter  deliveries settled, by idem.action (ack,
//	                                    retry, dead_letter) and idem.outcome: a
//	                                    retry with outcome in_progress is a
//	                                    delivery held MaxHold and handed back
//	idem.broker.dead_letters   counter  dead letters durable at the broker, by
//	                                    idem.reason (conflict, permanent,
//	                                    max_deliver, parked, invalid_data, ...)
//	idem.broker.action_errors  counter  failed broker actions (BrokerErr: an ack,
//	                                    retry or dead letter refused, a lock
//	                                    lost), by idem.action
//	idem.broker.store_outages  counter  store-outage reports (at most one per
//	                                    broker.OutageReportEvery while the store
//	                                    cannot be reached): a store-error loop
//	idem.broker.outage_held    counter  claims that met the outage (Outage.Held)
//	idem.broker.errors         counter  every other error the consumer handled by
//	                                    itself (a failed action again, a fetch, a
//	                                    commit, a keep-alive, a reconnection)
//
// The outbox relay's events (no idem.scope):
//
//	outbox.messages            counter    records the relay handled, by
//	                                      outbox.result: published, failed
//	                                      (retried), parked (alert)
//	outbox.batch.lag           histogram  seconds from a batch's oldest record's
//	                                      enqueue to the broker's confirmation
//	outbox.batch.duration      histogram  seconds per batch: fetch, publish, marks
//	outbox.errors              counter    store and listener failures the relay
//	                                      retries
//	outbox.lease.changes       counter    by outbox.lease: acquired, lost, released
//	outbox.cleanup.deleted     counter    published records deleted after the
//	                                      retention
//
// The Sweeper's sweeps:
//
//	idem.sweep.deleted         counter  expired records the sweeper deleted
//	idem.sweep.runs            counter  sweeps by idem.result (ok, error)
//	idem.sweep.last_success    gauge    Unix time of the last sweep that succeeded
//
// An outbox's backlog (pending, parked, lag) is read from its store:
// package outbox/outboxotel's gauges.
//
// Spans: one span per message, started when the guard begins (so the
// handler's own spans, started from the handler's context, nest under it)
// and named "idem <outcome>" when it ends, carrying the scope, the key
// (unless Options.OmitKey), the correlation id, the fencing token and the
// attempts; conflicts, failures and store errors set the span status to
// Error; failed renewals and releases are span events.
package idemotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/idem"
)

// Options configure the observer. The zero value uses the global providers.
type Options struct {
	MeterProvider  metric.MeterProvider // default otel.GetMeterProvider()
	TracerProvider trace.TracerProvider // default otel.GetTracerProvider()
	// OmitKey leaves message ids out of spans, for ids that carry personal data.
	OmitKey bool
	// NoSpans disables spans (metrics only).
	NoSpans bool
}

// Observer records every fact of idem's vocabulary as metrics and spans.
type Observer struct {
	opts     Options
	tracer   trace.Tracer
	messages metric.Int64Counter
	claim    metric.Float64Histogram
	handler  metric.Float64Histogram
	total    metric.Float64Histogram
	steps    metric.Int64Counter
	broker   brokerMetrics
	relay    relayMetrics
	sweep    sweepMetrics
}

var _ idem.FullObserver = (*Observer)(nil)

// spanCtx marks the span this observer started for a call, so Observe ends
// that one and not a span of the caller's.
type spanCtx struct{}

const scopeName = "github.com/idemgo/idem/idemotel"

// New creates the instruments.
func New(opts Options) (*Observer, error) {
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(scopeName)
	o := &Observer{opts: opts, tracer: tp.Tracer(scopeName)}
	var err error
	if o.messages, err = m.Int64Counter("idem.messages", metric.WithDescription("Messages by idempotency outcome"), metric.WithUnit("{message}")); err != nil {
		return nil, err
	}
	buckets := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
	if o.claim, err = m.Float64Histogram("idem.claim.duration", metric.WithDescription("Time claiming the key at the store"), metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if o.handler, err = m.Float64Histogram("idem.handler.duration", metric.WithDescription("Time in the handler"), metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if o.total, err = m.Float64Histogram("idem.duration", metric.WithDescription("Time for the whole idempotent call"), metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if o.steps, err = m.Int64Counter("idem.step.errors", metric.WithDescription("Failed lease renewals and releases"), metric.WithUnit("{error}")); err != nil {
		return nil, err
	}
	if err := o.broker.init(m); err != nil {
		return nil, err
	}
	if err := o.relay.init(m); err != nil {
		return nil, err
	}
	if err := o.sweep.init(m); err != nil {
		return nil, err
	}
	return o, nil
}

// ObserveStart implements idem.StartObserver: it starts the call's span and
// returns its context, which the guard runs the handler with.
func (o *Observer) ObserveStart(ctx context.Context, s idem.Start) context.Context {
	if o.opts.NoSpans {
		return ctx
	}
	attrs := []attribute.KeyValue{attribute.String("idem.scope", s.Key.Scope), attribute.String("idem.mode", s.Mode)}
	if !o.opts.OmitKey && s.Key.ID != "" {
		attrs = append(attrs, attribute.String("idem.key", s.Key.ID))
	}
	if s.CorrelationID != "" {
		attrs = append(attrs, attribute.String("idem.correlation_id", s.CorrelationID))
	}
	ctx, span := o.tracer.Start(ctx, "idem", trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	return context.WithValue(ctx, spanCtx{}, span)
}

// ObserveStep implements idem.StepObserver: a failed renewal or release is
// counted and recorded on the call's span.
func (o *Observer) ObserveStep(ctx context.Context, s idem.Step) {
	o.steps.Add(ctx, 1, metric.WithAttributes(attribute.String("idem.scope", s.Key.Scope), attribute.String("idem.step", s.Op)))
	if span, ok := ctx.Value(spanCtx{}).(trace.Span); ok {
		span.AddEvent("idem "+s.Op+" failed", trace.WithAttributes(
			attribute.Int64("idem.token", s.Token), attribute.String("error", s.Err.Error())))
	}
}

// Observe implements idem.Observer.
func (o *Observer) Observe(ctx context.Context, e idem.Event) {
	attrs := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("idem.scope", e.Key.Scope),
		attribute.String("idem.outcome", e.Outcome.String()),
		attribute.String("idem.mode", e.Mode),
	))
	o.messages.Add(ctx, 1, attrs)
	if e.Claim > 0 {
		o.claim.Record(ctx, e.Claim.Seconds(), attrs)
	}
	if e.Handler > 0 {
		o.handler.Record(ctx, e.Handler.Seconds(), attrs)
	}
	o.total.Record(ctx, e.Total.Seconds(), attrs)
	if o.opts.NoSpans {
		return
	}
	end := time.Now()
	spanAttrs := []attribute.KeyValue{
		attribute.String("idem.scope", e.Key.Scope),
		attribute.String("idem.outcome", e.Outcome.String()),
		attribute.String("idem.mode", e.Mode),
		attribute.Int64("idem.token", e.Token),
		attribute.Int("idem.attempts", e.Attempts),
	}
	if !o.opts.OmitKey {
		spanAttrs = append(spanAttrs, attribute.String("idem.key", e.Key.ID))
	}
	if e.Retaken {
		spanAttrs = append(spanAttrs, attribute.Bool("idem.retaken", true))
	}
	if e.TxRuns > 1 {
		spanAttrs = append(spanAttrs, attribute.Int("idem.tx_runs", e.TxRuns))
	}
	if e.CorrelationID != "" {
		spanAttrs = append(spanAttrs, attribute.String("idem.correlation_id", e.CorrelationID))
	}
	span, started := ctx.Value(spanCtx{}).(trace.Span)
	if started {
		span.SetName("idem " + e.Outcome.String())
		span.SetAttributes(spanAttrs...)
	} else {
		// A call whose start this observer did not see (it was wrapped
		// in an observer without ObserveStart): back-date the span.
		_, span = o.tracer.Start(ctx, "idem "+e.Outcome.String(),
			trace.WithTimestamp(end.Add(-e.Total)), trace.WithAttributes(spanAttrs...), trace.WithSpanKind(trace.SpanKindInternal))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
		if idem.Decide(idem.Result{Outcome: e.Outcome}, e.Err) != idem.ActionAck {
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(end))
}
