package broker

import (
	"context"
	"time"

	"github.com/idemgo/idem"
)

// ReasonMaxDeliver is the dead-letter reason of a delivery that would be
// retried past the adapter's delivery limit (JetStream MaxDeliver, a quorum
// queue's delivery-limit, Kafka's MaxAttempts, Service Bus
// MaxDeliveryCount).
const ReasonMaxDeliver = "max_deliver"

// Report is what happened to one delivery: the guard's outcome and the
// broker action the adapter took for it. It is the idem.Settlement the
// engine reports to its guard's observer (idem.SettlementObserver).
type Report = idem.Settlement

// Hooks are the user's places in an adapter's flow, the same in every
// adapter, typed by the adapter's message: code that must run at a given
// point of a delivery's way (a chaos harness kills the process in
// BeforeSettle). They are not where to observe: metrics, logs and alerts
// take the guard's observer (idem.Options.Observer), to which the engine
// reports every settle, the errors it handles and store outages (see
// package idem's SettlementObserver, ErrorObserver, OutageObserver).
// Nil fields are skipped. They run on the goroutine that handled the
// delivery and must be safe for concurrent use; a slow hook slows
// consumption.
type Hooks[M any] struct {
	// BeforeSettle runs once the outcome is known and before the broker
	// action (the ack, the retry, the dead letter): the record is durable
	// and the delivery is not yet settled. It is the worst moment to crash
	// (a chaos harness kills the process here), and the place for work
	// that must happen before the ack.
	BeforeSettle func(ctx context.Context, msg M, r Report)
	// AfterSettle runs after the broker action, with BrokerErr set when it
	// failed: after the ack, the nak or requeue, or the dead letter.
	AfterSettle func(ctx context.Context, msg M, r Report)
	// OnDeadLetter runs after a dead letter is durable at the broker (and
	// before AfterSettle), with the message at hand. Counting dead letters
	// is the observer's (idem.Settlement.DeadLettered).
	OnDeadLetter func(ctx context.Context, msg M, r Report)
	// OnError receives errors the adapter handles by itself without
	// stopping (a failed commit, a fetch error, a reconnection, a failed
	// dead-letter publish that will be retried; an *OutageError).
	//
	// Deprecated: the guard's observer receives them
	// (idem.ErrorObserver, and idem.OutageObserver for outages). It is
	// still called.
	OnError func(err error)
}

// Decide builds the Report of a guard call: idem.Decide's action, the
// dead-letter reason, and for a retry the delay (idem.RetryAfter: the
// holder's lease for a key in progress elsewhere, backoff otherwise).
func Decide(res idem.Result, err error, now time.Time, attempt int, backoff func(attempt int) time.Duration) Report {
	r := Report{Result: res, Err: err, Action: idem.Decide(res, err), Attempt: attempt}
	switch r.Action {
	case idem.ActionRetry:
		var fallback time.Duration
		if backoff != nil {
			fallback = backoff(attempt)
		}
		r.Delay = idem.RetryAfter(res, err, now, fallback)
	case idem.ActionDeadLetter:
		r.Reason = idem.DeadLetterReason(err)
		if r.Reason == "" {
			r.Reason = "permanent"
		}
	}
	return r
}

// CallBeforeSettle calls BeforeSettle when it is set. Adapters call the
// Call methods; users set the fields.
func (h Hooks[M]) CallBeforeSettle(ctx context.Context, msg M, r Report) {
	if h.BeforeSettle != nil {
		h.BeforeSettle(ctx, msg, r)
	}
}

// CallAfterSettle calls AfterSettle when it is set.
func (h Hooks[M]) CallAfterSettle(ctx context.Context, msg M, r Report) {
	if h.AfterSettle != nil {
		h.AfterSettle(ctx, msg, r)
	}
}

// CallOnDeadLetter calls OnDeadLetter when it is set.
func (h Hooks[M]) CallOnDeadLetter(ctx context.Context, msg M, r Report) {
	if h.OnDeadLetter != nil {
		h.OnDeadLetter(ctx, msg, r)
	}
}

// CallOnError calls OnError when it is set and err is not nil.
func (h Hooks[M]) CallOnError(err error) {
	if h.OnError != nil && err != nil {
		h.OnError(err)
	}
}
