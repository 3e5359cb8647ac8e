package idem

import (
	"context"
	"log/slog"
	"sync"
)

// NewSlogObserver logs one record per message: duplicates and processed
// messages at Debug, retries at Info, failures at Warn, conflicts, parked
// records, lost leases and dead letters at Error. Every record carries the
// scope, the key, the correlation id (when the message has one), the outcome
// and the timings. Failed steps inside a call (a renewal, a release) are
// logged at Warn as they happen.
func NewSlogObserver(l *slog.Logger) Observer {
	if l == nil {
		l = slog.Default()
	}
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

var _ StepObserver = slogObserver{}

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

// Counter is an Observer that counts events by outcome. It is safe for
// concurrent use; the demo and tests read it.
type Counter struct {
	mu     sync.Mutex
	counts map[Outcome]int64
}

// Observe counts e.
func (c *Counter) Observe(_ context.Context, e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[Outcome]int64)
	}
	c.counts[e.Outcome]++
}

// Count returns how many events had outcome o.
func (c *Counter) Count(o Outcome) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[o]
}

// Counts returns a snapshot of all counts keyed by outcome name.
func (c *Counter) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.counts))
	for o, n := range c.counts {
		out[o.String()] = n
	}
	return out
}
