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
// broker action the adapter took for it.
type Report struct {
	Result idem.Result   // the guard's result
	Err    error         // the guard's error; nil when processed or a duplicate
	Action idem.Action   // ack, retry or dead_letter
	Reason string        // the dead-letter reason (idem.DeadLetterReason, ReasonMaxDeliver, ...)
	Delay  time.Duration // how long a retry waits (nak delay, requeue hold, partition hold)
	// Attempt is the delivery count where the broker keeps one (1 on the
	// first delivery), else how many times this process tried it.
	Attempt int
	// BrokerErr is the failure of the action itself (ack, nak, dead-letter
	// publish). The delivery then comes back, which is safe: its record
	// decides again.
	BrokerErr error
}

// Hooks are the user's places in an adapter's flow, the same in every
// adapter. Nil fields are skipped. They run on the goroutine that handled
// the delivery and must be safe for concurrent use; a slow hook slows
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
	// before AfterSettle): the place to alert on conflicts.
	OnDeadLetter func(ctx context.Context, msg M, r Report)
	// OnError receives errors the adapter handles by itself without
	// stopping (a failed commit, a fetch error, a reconnection, a failed
	// dead-letter publish that will be retried).
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
