package outbox

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives the relay's events: metrics, logs, alerts. Observe
// runs on the relay's goroutines, so it must be quick and safe for
// concurrent use.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc is a function used as an Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventBatch ends each batch the relay fetched: Published, Failed and
	// Parked count its records, Lag is the age of the oldest one published
	// (commit to broker confirmation), Duration the batch's time.
	EventBatch EventKind = iota + 1
	// EventFailed is one publish failure that will be retried (Record,
	// Err, Record.NextAttemptAt).
	EventFailed
	// EventParked is one record parked: rejected by the broker or out of
	// attempts (Record, Err). Alert on it: an operator retries it.
	EventParked
	// EventLeaseAcquired: this relay became the active one (Lease).
	EventLeaseAcquired
	// EventLeaseLost: this relay stopped being the active one against its
	// will: another took the lease over, or a renewal failed (Err) until
	// the lease ended. Alert on it. A graceful stop is EventLeaseReleased.
	EventLeaseLost
	// EventCleanup is one cleanup batch (Deleted).
	EventCleanup
	// EventError is a store or listener failure the relay retries (Err).
	EventError
	// EventLeaseReleased: Run ended (its context was cancelled) and the
	// relay gave its lease up so a standby takes over at once (Lease; Err
	// when the store could not record the release, in which case the
	// lease simply runs out). It is the normal end of a relay, not a loss.
	EventLeaseReleased
)

// String is the kind's name (batch, failed, parked, lease_acquired, ...).
func (k EventKind) String() string {
	switch k {
	case EventBatch:
		return "batch"
	case EventFailed:
		return "failed"
	case EventParked:
		return "parked"
	case EventLeaseAcquired:
		return "lease_acquired"
	case EventLeaseLost:
		return "lease_lost"
	case EventCleanup:
		return "cleanup"
	case EventError:
		return "error"
	case EventLeaseReleased:
		return "lease_released"
	}
	return "unknown"
}

// Event is one thing the relay did.
type Event struct {
	Kind  EventKind
	Owner string // the relay instance

	// EventBatch.
	Published, Failed, Parked int
	Lag                       time.Duration
	Duration                  time.Duration

	// EventFailed, EventParked: the record as updated.
	Record *Record
	// EventFailed, EventParked, EventLeaseLost, EventLeaseReleased, EventError.
	Err error

	// EventLeaseAcquired, EventLeaseLost, EventLeaseReleased.
	Lease Lease

	// EventCleanup.
	Deleted int
}

// NewSlogObserver logs the relay's events: batches at Debug, lease changes
// and cleanups at Info, failures and errors at Warn, parked records at
// Error.
func NewSlogObserver(l *slog.Logger) Observer {
	if l == nil {
		l = slog.Default()
	}
	return ObserverFunc(func(ctx context.Context, e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventLeaseAcquired, EventLeaseLost, EventLeaseReleased, EventCleanup:
			level = slog.LevelInfo
		case EventFailed, EventError:
			level = slog.LevelWarn
		case EventParked:
			level = slog.LevelError
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("owner", e.Owner)}
		switch e.Kind {
		case EventBatch:
			attrs = append(attrs, slog.Int("published", e.Published), slog.Int("failed", e.Failed),
				slog.Int("parked", e.Parked), slog.Duration("lag", e.Lag), slog.Duration("duration", e.Duration))
		case EventLeaseAcquired, EventLeaseLost, EventLeaseReleased:
			attrs = append(attrs, slog.Int64("token", e.Lease.Token), slog.Time("until", e.Lease.Until))
		case EventCleanup:
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
		l.LogAttrs(ctx, level, "outbox "+e.Kind.String(), attrs...)
	})
}
