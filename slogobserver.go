package idem

import (
	"context"
	"log/slog"
)

// NewSlogObserver logs every fact of the vocabulary. One record per
// message: duplicates and processed messages at Debug, retries at Info,
// failures at Warn, conflicts, parked records, lost leases and dead letters
// at Error; each carries the scope, the key, the correlation id (when the
// message has one), the outcome and the timings. Failed steps inside a
// call (a renewal, a release) at Warn as they happen. A consumer's settles
// at Debug (a failed broker action at Warn, a dead letter at Error), the
// errors components handled by themselves and store outages at Warn,
// sweeps at Debug (a failed one at Warn), and the outbox relay's events:
// batches at Debug, lease changes and cleanups at Info, failures at Warn,
// parked records and a lost lease at Error.
func NewSlogObserver(l *slog.Logger) FullObserver {
	if l == nil {
		l = slog.Default()
	}
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

var _ FullObserver = slogObserver{}

func (o slogObserver) Observe(ctx context.Context, e Event) {
	level := slog.LevelDebug
	switch e.Outcome {
	case OutcomeInProgress, OutcomeReconciled, OutcomeUnkeyed:
		level = slog.LevelInfo
	case OutcomeFailed, OutcomeStoreError:
		level = slog.LevelWarn
	case OutcomeConflict, OutcomeStale, OutcomePermanent, OutcomeNoKey, OutcomeLeaseLost:
		level = slog.LevelError
	}
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("scope", e.Key.Scope),
		slog.String("key", e.Key.ID),
		slog.String("outcome", e.Outcome.String()),
		slog.String("mode", e.Mode),
		slog.Int64("token", e.Token),
		slog.Int("attempts", e.Attempts),
		slog.Duration("claim", e.Claim),
		slog.Duration("handler", e.Handler),
		slog.Duration("total", e.Total),
	}
	if e.CorrelationID != "" {
		attrs = append(attrs, slog.String("correlation_id", e.CorrelationID))
	}
	if e.Retaken {
		attrs = append(attrs, slog.Bool("retaken", true))
	}
	if e.TxRuns > 1 {
		attrs = append(attrs, slog.Int("tx_runs", e.TxRuns))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "idem "+e.Outcome.String(), attrs...)
}

func (o slogObserver) ObserveStep(ctx context.Context, s Step) {
	attrs := []slog.Attr{
		slog.String("scope", s.Key.Scope),
		slog.String("key", s.Key.ID),
		slog.String("step", s.Op),
		slog.Int64("token", s.Token),
		slog.String("error", s.Err.Error()),
	}
	if s.CorrelationID != "" {
		attrs = append(attrs, slog.String("correlation_id", s.CorrelationID))
	}
	o.l.LogAttrs(ctx, slog.LevelWarn, "idem "+s.Op+" failed", attrs...)
}

func (o slogObserver) ObserveStart(ctx context.Context, _ Start) context.Context { return ctx }

func (o slogObserver) ObserveSettlement(ctx context.Context, s Settlement) {
	level := slog.LevelDebug
	switch {
	case s.DeadLettered:
		level = slog.LevelError
	case s.BrokerErr != nil:
		level = slog.LevelWarn
	}
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("scope", s.Result.Key.Scope),
		slog.String("key", s.Result.Key.ID),
		slog.String("action", s.Action.String()),
		slog.String("outcome", s.Result.Outcome.String()),
		slog.Int("attempt", s.Attempt),
	}
	if s.Reason != "" {
		attrs = append(attrs, slog.String("reason", s.Reason))
	}
	if s.Delay > 0 {
		attrs = append(attrs, slog.Duration("delay", s.Delay))
	}
	if s.Err != nil {
		attrs = append(attrs, slog.String("error", s.Err.Error()))
	}
	if s.BrokerErr != nil {
		attrs = append(attrs, slog.String("broker_error", s.BrokerErr.Error()))
	}
	o.l.LogAttrs(ctx, level, "idem settle "+s.Action.String(), attrs...)
}

func (o slogObserver) ObserveError(ctx context.Context, e HandledError) {
	attrs := []slog.Attr{slog.String("component", e.Component), slog.String("error", e.Err.Error())}
	if e.Scope != "" {
		attrs = append(attrs, slog.String("scope", e.Scope))
	}
	o.l.LogAttrs(ctx, slog.LevelWarn, "idem "+e.Component+" error", attrs...)
}

func (o slogObserver) ObserveOutage(ctx context.Context, out Outage) {
	o.l.LogAttrs(ctx, slog.LevelWarn, "idem store outage", slog.String("scope", out.Scope),
		slog.Int("held", out.Held), slog.String("error", out.Err.Error()))
}

func (o slogObserver) ObserveSweep(ctx context.Context, s Sweep) {
	attrs := []slog.Attr{slog.Int("deleted", s.Deleted), slog.Duration("duration", s.Duration)}
	level := slog.LevelDebug
	if s.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", s.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "idem sweep", attrs...)
}

func (o slogObserver) ObserveRelay(ctx context.Context, e RelayEvent) {
	level := slog.LevelDebug
	switch e.Kind {
	case RelayLeaseAcquired, RelayLeaseReleased, RelayCleanup:
		level = slog.LevelInfo
	case RelayFailed:
		level = slog.LevelWarn
	case RelayParked, RelayLeaseLost:
		level = slog.LevelError
	}
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("owner", e.Owner)}
	switch e.Kind {
	case RelayBatch:
		attrs = append(attrs, slog.Int("published", e.Published), slog.Int("failed", e.Failed),
			slog.Int("parked", e.Parked), slog.Duration("lag", e.Lag), slog.Duration("duration", e.Duration))
	case RelayLeaseAcquired, RelayLeaseLost, RelayLeaseReleased:
		attrs = append(attrs, slog.Int64("token", e.Lease.Token), slog.Time("until", e.Lease.Until))
	case RelayCleanup:
		attrs = append(attrs, slog.Int("deleted", e.Deleted))
	}
	if r := e.Record; r != nil {
		attrs = append(attrs, slog.Int64("seq", r.Seq), slog.String("id", r.ID),
			slog.String("destination", r.Destination), slog.Int("attempts", r.Attempts))
		if r.OrderingKey != "" {
			attrs = append(attrs, slog.String("ordering_key", r.OrderingKey))
		}
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "outbox "+e.Kind.String(), attrs...)
}
