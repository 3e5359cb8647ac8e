package idem

import (
	"context"
	"errors"
	"time"
)

// Outcome is what happened to one message.
type Outcome int

// Outcomes reported in Result and Event.
const (
	OutcomeProcessed  Outcome = iota + 1 // the handler ran and the record is completed
	OutcomeDuplicate                     // completed before: skipped, recorded result returned
	OutcomeInProgress                    // another live owner holds the key: retry later
	OutcomeConflict                      // same key, other content: dead-letter
	OutcomeStale                         // stale in-progress record parked for an operator
	OutcomeFailed                        // the handler failed: claim released, retry
	OutcomePermanent                     // the handler failed permanently: dead-letter
	OutcomeNoKey                         // no usable key and the policy rejects: dead-letter
	OutcomeUnkeyed                       // no key, processed without dedup (MissingKeyProcess)
	OutcomeReconciled                    // stale record completed by Options.Reconcile
	OutcomeLeaseLost                     // another owner took the key over, or the lease ran out before a renewal answered: retry
	OutcomeStoreError                    // the store failed: not acked, retry
	OutcomeSuperseded                    // a newer version was applied already: skipped (version guards)
)

var outcomeNames = map[Outcome]string{
	OutcomeProcessed: "processed", OutcomeDuplicate: "duplicate", OutcomeInProgress: "in_progress",
	OutcomeConflict: "conflict", OutcomeStale: "stale", OutcomeFailed: "failed",
	OutcomePermanent: "permanent", OutcomeNoKey: "no_key", OutcomeUnkeyed: "unkeyed",
	OutcomeReconciled: "reconciled", OutcomeLeaseLost: "lease_lost", OutcomeStoreError: "store_error",
	OutcomeSuperseded: "superseded",
}

// String is the outcome's name in logs and metrics (processed, duplicate, ...).
func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return "unknown"
}

// Result is what Guard.Do and DoTx return alongside their error.
type Result struct {
	Outcome Outcome
	Key     Key
	Value   []byte // the handler's result, or the recorded one for duplicates
	// Record is the stored record as the call left it, where one was read
	// (duplicate, conflict, in progress, stale, a claim of its own):
	// released after a failed two-phase handler whose claim was given
	// back; zero after a transactional inbox call whose marker rolled
	// back with its transaction.
	Record  Record
	Retaken bool // the key was taken over from a stale in-progress owner
}

// Action is what a broker integration does with a delivery.
type Action int

// Actions.
const (
	ActionAck        Action = iota + 1 // ack / commit: the record is durable
	ActionRetry                        // do not ack: nak with a delay, requeue, hold the partition
	ActionDeadLetter                   // dead-letter with the reason, then ack the original
)

// String is the action's name (ack, retry, dead_letter).
func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionDeadLetter:
		return "dead_letter"
	}
	return "unknown"
}

// Decide maps a call's outcome to the broker action every integration takes:
// ack only when the record is durable (processed, duplicate, superseded,
// unkeyed by choice); dead-letter what retrying cannot fix (conflicts,
// permanent errors, missing keys, parked records); retry everything else
// (in progress elsewhere, transient handler errors, store failures).
func Decide(res Result, err error) Action {
	switch {
	case err == nil:
		return ActionAck
	case errors.Is(err, ErrResultTooLarge) && res.Outcome == OutcomeProcessed:
		return ActionAck // effects committed; only the replayed result was dropped
	case IsPermanent(err), errors.Is(err, ErrStale):
		return ActionDeadLetter
	default:
		return ActionRetry
	}
}

// DeadLetterReason is a short machine-readable reason for a dead-letter
// header: conflict, no_key, invalid_key, parked, invalid_data, no_records, permanent, or "" when err
// should not be dead-lettered.
func DeadLetterReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrNoKey):
		return "no_key"
	case errors.Is(err, ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, ErrStale):
		return "parked"
	case errors.Is(err, ErrInvalidData):
		return "invalid_data"
	case errors.Is(err, ErrNoRecords):
		return "no_records"
	case errors.Is(err, ErrPermanent):
		return "permanent"
	}
	return ""
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

// Observer receives one Event per message. Implementations must be safe for
// concurrent use and fast: they run on the message path. Logging (NewSlogObserver),
// metrics and traces plug in here so the core imports none of them.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

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

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Observers fans events out to several observers in order; starts and steps
// go to those that implement StartObserver and StepObserver, each start's
// context passed on to the next.
func Observers(obs ...Observer) Observer {
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

func (m multiObserver) ObserveStep(ctx context.Context, s Step) {
	for _, o := range m {
		if so, ok := o.(StepObserver); ok {
			so.ObserveStep(ctx, s)
		}
	}
}
