// Package idemprom serves idem's metrics at a Prometheus endpoint, through
// the OpenTelemetry Prometheus exporter: the idemotel instruments (messages
// by outcome, the claim, handler and call latency histograms, failed
// steps, the consumer engine's settles, dead letters and store outages,
// the sweeper's sweeps, the outbox relay's events: see package idemotel),
// and gauges of the records a store holds and an outbox's backlog, which
// the dashboard and alert rules in the repository's ops/ directory read.
// Exporter.Observer is the one observer to set: on the guards (the
// consumers report to it through them), the outbox relay and the Sweeper.
//
//	exp, err := idemprom.New(idemprom.Options{Store: store, Outbox: ob})
//	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: exp.Observer()})
//	sw := idem.Sweeper{Store: store, Observer: exp.Observer()}
//	mux.Handle("/metrics", exp)
//
// Names as Prometheus sees them (labels idem_scope, idem_outcome, idem_mode):
//
//	idem_messages_total                       counter   messages by outcome
//	idem_claim_duration_seconds               histogram time claiming at the store
//	idem_handler_duration_seconds             histogram time in the handler
//	idem_duration_seconds                     histogram the whole call
//	idem_step_errors_total                    counter   failed renewals and releases (idem_step)
//	idem_records                              gauge     records by scope and state (idem_state)
//	idem_records_stale                        gauge     in progress with the lease ended, by scope
//	idem_records_expired                      gauge     retention ended, awaiting a sweep, by scope
//	idem_records_oldest_in_progress_seconds   gauge     age of the oldest in-progress record, by scope
//	idem_sweep_deleted_total                  counter   records the sweeper deleted
//	idem_sweep_runs_total                     counter   sweeps by idem_result (ok, error)
//	idem_sweep_last_success_seconds           gauge     Unix time of the last sweep that succeeded
//	idem_outbox_messages                      gauge     outbox records by idem_state (pending, parked, published)
//	idem_outbox_lag_seconds                   gauge     age of the oldest pending outbox message
//
// The record and outbox gauges come from the stores' Stats, which read every
// record: they are counted at most once per Options.StatsEvery, however often
// Prometheus scrapes, in the scrape that finds them older.
package idemprom

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/outbox"
)

// Options configure an Exporter. The zero value serves the message metrics
// alone, from a registry of its own.
type Options struct {
	// Registry the exporter registers its collector in, and the endpoint
	// serves. Default: a new registry, so the endpoint serves idem's
	// metrics only. Pass prometheus.DefaultRegisterer's registry to add them
	// to an existing /metrics.
	Registry *prometheus.Registry
	// Store, when set, is counted for the idem_records gauges.
	Store idem.Inspector
	// Outbox, when set, is counted for the idem_outbox gauges.
	Outbox outbox.Inspector
	// StatsEvery is how often the stores are counted at most. Default 1m.
	StatsEvery time.Duration
	// StatsTimeout bounds one count. Default 30s.
	StatsTimeout time.Duration
	// Clock is the time records are judged at; default time.Now.
	Clock func() time.Time
	// Spans also records spans on the global tracer provider (idemotel's
	// spans); by default the observer records metrics only.
	Spans bool
}

// Exporter is the Prometheus endpoint (an http.Handler) and the observer
// that feeds it.
type Exporter struct {
	opts     Options
	provider *sdkmetric.MeterProvider
	observer *idemotel.Observer
	handler  http.Handler

	mu        sync.Mutex
	counted   time.Time
	records   []idem.ScopeStats
	box       outbox.Stats
	boxOK     bool
	countedAt time.Time // the clock's time of the count
}

// New builds the exporter and its instruments.
func New(opts Options) (*Exporter, error) {
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.StatsEvery <= 0 {
		opts.StatsEvery = time.Minute
	}
	if opts.StatsTimeout <= 0 {
		opts.StatsTimeout = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	reader, err := otelprom.New(otelprom.WithRegisterer(opts.Registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("idemprom: %w", err)
	}
	e := &Exporter{opts: opts, provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}
	otelOpts := idemotel.Options{MeterProvider: e.provider, NoSpans: !opts.Spans}
	if opts.Spans {
		otelOpts.TracerProvider = otel.GetTracerProvider()
	}
	if e.observer, err = idemotel.New(otelOpts); err != nil {
		return nil, fmt.Errorf("idemprom: %w", err)
	}
	if err := e.instruments(); err != nil {
		return nil, fmt.Errorf("idemprom: %w", err)
	}
	e.handler = promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})
	return e, nil
}

// Observer is the observer to give the guards (idem.Options.Observer), the
// outbox relay (outbox.RelayOptions.Observer) and the Sweeper
// (Sweeper.Observer): idemotel's, on the exporter's provider.
func (e *Exporter) Observer() idem.FullObserver { return e.observer }

// MeterProvider is the provider the exporter reads, for instruments of the
// application's own that should be served beside idem's.
func (e *Exporter) MeterProvider() metric.MeterProvider { return e.provider }

// ServeHTTP serves the metrics in the Prometheus exposition format.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) }

// Shutdown stops the meter provider.
func (e *Exporter) Shutdown(ctx context.Context) error { return e.provider.Shutdown(ctx) }

const scopeName = "github.com/idemgo/idem/idemprom"

func (e *Exporter) instruments() error {
	m := e.provider.Meter(scopeName)
	if e.opts.Store == nil && e.opts.Outbox == nil {
		return nil
	}
	records, err := m.Int64ObservableGauge("idem.records", metric.WithDescription("Records by scope and state"), metric.WithUnit("{record}"))
	if err != nil {
		return err
	}
	stale, err := m.Int64ObservableGauge("idem.records.stale", metric.WithDescription("In-progress records whose lease ended: crashed or stalled owners, parked keys"), metric.WithUnit("{record}"))
	if err != nil {
		return err
	}
	expired, err := m.Int64ObservableGauge("idem.records.expired", metric.WithDescription("Records whose retention ended, awaiting a sweep"), metric.WithUnit("{record}"))
	if err != nil {
		return err
	}
	oldest, err := m.Float64ObservableGauge("idem.records.oldest_in_progress", metric.WithDescription("Age of the oldest in-progress record"), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	boxMsgs, err := m.Int64ObservableGauge("idem.outbox.messages", metric.WithDescription("Outbox records by state"), metric.WithUnit("{message}"))
	if err != nil {
		return err
	}
	boxLag, err := m.Float64ObservableGauge("idem.outbox.lag", metric.WithDescription("Age of the oldest pending outbox message: how far the relay is behind"), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		recs, box, boxOK, at := e.stats(ctx)
		for _, s := range recs {
			scope := attribute.String("idem.scope", s.Scope)
			for state, n := range map[idem.State]int64{idem.StateInProgress: s.InProgress, idem.StateCompleted: s.Completed, idem.StateReleased: s.Released} {
				o.ObserveInt64(records, n, metric.WithAttributes(scope, attribute.String("idem.state", string(state))))
			}
			o.ObserveInt64(stale, s.Stale, metric.WithAttributes(scope))
			o.ObserveInt64(expired, s.Expired, metric.WithAttributes(scope))
			age := 0.0
			if !s.OldestInProgress.IsZero() {
				age = max(at.Sub(s.OldestInProgress).Seconds(), 0)
			}
			o.ObserveFloat64(oldest, age, metric.WithAttributes(scope))
		}
		if boxOK {
			for state, n := range map[outbox.State]int64{outbox.StatePending: box.Pending, outbox.StateParked: box.Parked, outbox.StatePublished: box.Published} {
				o.ObserveInt64(boxMsgs, n, metric.WithAttributes(attribute.String("idem.state", string(state))))
			}
			o.ObserveFloat64(boxLag, box.Lag(at).Seconds())
		}
		return nil
	}, records, stale, expired, oldest, boxMsgs, boxLag)
	return err
}

// stats returns the last counts, counting again when they are older than
// StatsEvery. A failed count keeps the previous figures and is reported to
// the OpenTelemetry error handler.
func (e *Exporter) stats(ctx context.Context) ([]idem.ScopeStats, outbox.Stats, bool, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.counted.IsZero() && time.Since(e.counted) < e.opts.StatsEvery {
		return e.records, e.box, e.boxOK, e.countedAt
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.StatsTimeout)
	defer cancel()
	now := e.opts.Clock()
	var errs []error
	if e.opts.Store != nil {
		if st, err := e.opts.Store.Stats(ctx, now); err != nil {
			errs = append(errs, fmt.Errorf("idemprom: count the records: %w", err))
		} else {
			e.records = st
		}
	}
	if e.opts.Outbox != nil {
		if st, err := e.opts.Outbox.Stats(ctx, now); err != nil {
			errs = append(errs, fmt.Errorf("idemprom: count the outbox: %w", err))
		} else {
			e.box, e.boxOK = st, true
		}
	}
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	e.counted, e.countedAt = time.Now(), now
	return e.records, e.box, e.boxOK, e.countedAt
}
