package idem

import (
	"context"
	"time"
)

// The observability vocabulary. One Observer value, set once as the
// guard's Options.Observer, is what every component reports to: the guard
// calls Observe (and ObserveStart, ObserveStep); the consumer engine of
// package broker calls its guard's observer for each settle, the errors it
// handles by itself and store outages; the outbox relay (its
// RelayOptions.Observer) and the Sweeper (Sweeper.Observer) take an
// Observer too. Each fact has an optional interface of its own, with its
// own method name, so one type implements as many as it wants (pgx's
// tracers and franz-go's HookXxx interfaces are the model); a component
// calls those its observer implements and skips the rest. FullObserver
// embeds them all: a bridge that asserts it (idemotel, idemprom, the
// console's recorder, NewSlogObserver) stops building when a fact is
// added, until it reports that fact too.
//
// Observers run on the paths they observe: they must be fast and safe for
// concurrent use.

// Observer receives one Event per message the guard handles: the base of
// the vocabulary, implemented by every observer. Logging
// (NewSlogObserver), metrics and traces plug in here so the core imports
// none of them.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Event is reported to the Observer once per message.
type Event struct {
	Key      Key
	Mode     string // "two-phase", "tx", or an integration's own mode
	Outcome  Outcome
	Err      error
	Token    int64
	Attempts int
	Retaken  bool
	Claim    time.Duration // time spent claiming at the store
	Handler  time.Duration // time spent in the user's handler
	Total    time.Duration

	// CorrelationID is the message's correlation id (Options.Correlation,
	// or the one the caller put in the context), "" when it has none.
	CorrelationID string

	// TxRuns is how many times DoTx's transaction ran (0 outside DoTx): 2
	// when the store ran it again, as store/postgres does after a marker
	// deferred to the handler's first statement met a recorded key. With
	// a deferred marker, the marker's own time counts in Handler, not Claim.
	TxRuns int
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// StartObserver is implemented by observers that see a message before
// idem works on it. The context ObserveStart returns is the one the guard
// runs the claim, the handler and the completion with, and passes to
// Observe for the same message: a tracer starts its span here, so the
// handler's own spans nest under it (pgx's TraceQueryStart is the model).
type StartObserver interface {
	Observer
	ObserveStart(ctx context.Context, s Start) context.Context
}

// Start is what a StartObserver learns when a message's call begins.
type Start struct {
	Key           Key
	Mode          string // "two-phase", "tx"
	CorrelationID string
}

// StepObserver is implemented by observers that want the steps that fail
// inside a call and do not decide its outcome: a lease renewal, a release
// after a handler error. The outcome still comes to Observe once.
type StepObserver interface {
	Observer
	ObserveStep(ctx context.Context, s Step)
}

// Step is one failed store step of a call.
type Step struct {
	Key           Key
	Op            string // "renew", "release", "retain" (a job keeping its finished steps)
	Token         int64
	Err           error
	CorrelationID string
}

// SettlementObserver is implemented by observers that want what a broker
// consumer did with each delivery: the consumer engine (package broker,
// every adapter on it) reports one Settlement per delivery it handled,
// after the broker action, to its guard's observer.
type SettlementObserver interface {
	Observer
	ObserveSettlement(ctx context.Context, s Settlement)
}

// Settlement is what happened to one delivery: the guard's outcome and the
// broker action taken for it (package broker's Report).
type Settlement struct {
	Result Result        // the guard's result (Result.Key: the message's key)
	Err    error         // the guard's error; nil when processed or a duplicate
	Action Action        // ack, retry or dead_letter
	Reason string        // the dead-letter reason (DeadLetterReason, broker.ReasonMaxDeliver, ...)
	Delay  time.Duration // how long a retry waits (nak delay, requeue hold, partition hold)
	// Attempt is the delivery count where the broker keeps one (1 on the
	// first delivery), else how many times this process tried it.
	Attempt int
	// BrokerErr is the failure of the action itself (ack, nak, dead-letter
	// publish). The delivery then comes back, which is safe: its record
	// decides again.
	BrokerErr error
	// DeadLettered reports that the dead letter is durable at the broker
	// (Action is ActionDeadLetter and its publish succeeded): alert on
	// these.
	DeadLettered bool
}

// ErrorObserver is implemented by observers that want the errors a
// component handled by itself and went on from: a consumer's failed fetch,
// commit, keep-alive or reconnection, a failed broker action, the outbox
// relay's store and listener failures.
type ErrorObserver interface {
	Observer
	ObserveError(ctx context.Context, e HandledError)
}

// HandledError is one error a component handled by itself.
type HandledError struct {
	// Component is who handled it: "broker" (the consumer engine and its
	// adapters) or "outbox" (the relay).
	Component string
	// Scope is the consumer's guard's scope ("" outside a consumer).
	Scope string
	Err   error
}

// OutageObserver is implemented by observers that want store outages as a
// consumer meets them: deliveries held, spending no broker delivery, while
// the store cannot be reached. The consumer engine reports one Outage at
// most every ten seconds (broker.OutageReportEvery) while it lasts.
type OutageObserver interface {
	Observer
	ObserveOutage(ctx context.Context, o Outage)
}

// Outage is one report of a store outage.
type Outage struct {
	Scope string // the guard's scope (the consumer's identity): whose store is out
	Held  int    // claims that met the outage since the previous report
	Err   error  // the latest store error
}

// SweepObserver is implemented by observers that want the Sweeper's
// sweeps (Sweeper.Observer).
type SweepObserver interface {
	Observer
	ObserveSweep(ctx context.Context, s Sweep)
}

// Sweep is one sweep of expired records.
type Sweep struct {
	Deleted  int           // records deleted
	Err      error         // why the sweep stopped early; it is tried again at the next interval
	Duration time.Duration // the sweep's time
}

// RelayObserver is implemented by observers that want the outbox relay's
// events (package outbox, whose Event is a RelayEvent). Its store and
// listener failures come to ObserveError.
type RelayObserver interface {
	Observer
	ObserveRelay(ctx context.Context, e RelayEvent)
}

// RelayEventKind says what a RelayEvent reports.
type RelayEventKind int

// Relay event kinds (package outbox names them EventBatch, EventFailed, ...).
const (
	// RelayBatch ends each batch the relay fetched: Published, Failed and
	// Parked count its records, Lag is the age of the oldest one published
	// (commit to broker confirmation), Duration the batch's time.
	RelayBatch RelayEventKind = iota + 1
	// RelayFailed is one publish failure that will be retried (Record,
	// Err, Record.NextAttemptAt).
	RelayFailed
	// RelayParked is one record parked: rejected by the broker or out of
	// attempts (Record, Err). Alert on it: an operator retries it.
	RelayParked
	// RelayLeaseAcquired: this relay became the active one (Lease).
	RelayLeaseAcquired
	// RelayLeaseLost: this relay stopped being the active one against its
	// will: another took the lease over, or a renewal failed (Err) until
	// the lease ended. Alert on it. A graceful stop is RelayLeaseReleased.
	RelayLeaseLost
	// RelayCleanup is one cleanup batch (Deleted).
	RelayCleanup
	_ // 7: outbox.EventError, no longer reported (ErrorObserver instead)
	// RelayLeaseReleased: Run ended (its context was cancelled) and the
	// relay gave its lease up so a standby takes over at once (Lease; Err
	// when the store could not record the release, in which case the
	// lease simply runs out). It is the normal end of a relay, not a loss.
	RelayLeaseReleased
)

// String is the kind's name (batch, failed, parked, lease_acquired, ...).
func (k RelayEventKind) String() string {
	switch k {
	case RelayBatch:
		return "batch"
	case RelayFailed:
		return "failed"
	case RelayParked:
		return "parked"
	case RelayLeaseAcquired:
		return "lease_acquired"
	case RelayLeaseLost:
		return "lease_lost"
	case RelayCleanup:
		return "cleanup"
	case RelayLeaseReleased:
		return "lease_released"
	}
	return "unknown"
}

// RelayEvent is one thing the outbox relay did.
type RelayEvent struct {
	Kind  RelayEventKind
	Owner string // the relay instance

	// RelayBatch.
	Published, Failed, Parked int
	Lag                       time.Duration
	Duration                  time.Duration

	// RelayFailed, RelayParked: the record as updated.
	Record *RelayRecord
	// RelayFailed, RelayParked, RelayLeaseLost, RelayLeaseReleased.
	Err error

	// RelayLeaseAcquired, RelayLeaseLost, RelayLeaseReleased.
	Lease RelayLease

	// RelayCleanup.
	Deleted int
}

// RelayRecord is what a RelayEvent tells of an outbox record.
type RelayRecord struct {
	Seq           int64
	ID            string
	Destination   string
	OrderingKey   string
	Attempts      int
	NextAttemptAt time.Time // when a failed record is tried again
}

// RelayLease is the relay lease a RelayEvent is about.
type RelayLease struct {
	Owner string
	Token int64 // increases with every new holder
	Until time.Time
}

// FullObserver is the whole vocabulary. A bridge that reports every fact
// (idemotel, idemprom, the console's Recorder, NewSlogObserver) asserts
//
//	var _ idem.FullObserver = (*Bridge)(nil)
//
// so that adding a fact, one interface here, stops its build until it
// implements the new method.
type FullObserver interface {
	StartObserver
	StepObserver
	SettlementObserver
	ErrorObserver
	OutageObserver
	SweepObserver
	RelayObserver
}

// Observers fans every fact out to several observers in order, each to
// those that implement its interface; each start's context is passed on to
// the next.
func Observers(obs ...Observer) FullObserver {
	var m multiObserver
	for _, o := range obs {
		if o != nil {
			m = append(m, o)
		}
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}

func (m multiObserver) ObserveStart(ctx context.Context, s Start) context.Context {
	for _, o := range m {
		if so, ok := o.(StartObserver); ok {
			ctx = so.ObserveStart(ctx, s)
		}
	}
	return ctx
}

// each calls f with every observer of m that implements T.
func each[T any](m multiObserver, f func(T)) {
	for _, o := range m {
		if t, ok := o.(T); ok {
			f(t)
		}
	}
}

func (m multiObserver) ObserveStep(ctx context.Context, s Step) {
	each(m, func(o StepObserver) { o.ObserveStep(ctx, s) })
}

func (m multiObserver) ObserveSettlement(ctx context.Context, s Settlement) {
	each(m, func(o SettlementObserver) { o.ObserveSettlement(ctx, s) })
}

func (m multiObserver) ObserveError(ctx context.Context, e HandledError) {
	each(m, func(o ErrorObserver) { o.ObserveError(ctx, e) })
}

func (m multiObserver) ObserveOutage(ctx context.Context, out Outage) {
	each(m, func(o OutageObserver) { o.ObserveOutage(ctx, out) })
}

func (m multiObserver) ObserveSweep(ctx context.Context, s Sweep) {
	each(m, func(o SweepObserver) { o.ObserveSweep(ctx, s) })
}

func (m multiObserver) ObserveRelay(ctx context.Context, e RelayEvent) {
	each(m, func(o RelayObserver) { o.ObserveRelay(ctx, e) })
}
