package broker

import (
	"context"
	"errors"
	"time"

	"github.com/idemgo/idem"
)

// Settler is what a Processor needs of a broker for one delivery of type
// M: what the guard reads of it, what the broker says of it, and how it is
// settled. The optional capabilities (KeepAliver, Delayer, InPlace, Runner,
// and for a Consumer's transport Returner and Drainer) are the interfaces
// in capabilities.go.
type Settler[M any] interface {
	// Message is the guard's view of msg (the adapter's MessageOf): the
	// transport's stable id in Message.ID, headers, payload.
	Message(msg M) idem.Message
	// Delivery is msg's delivery count and whether the broker would drop
	// or dead-letter it rather than deliver it again.
	Delivery(msg M) Delivery
	// Ack settles msg as done: its record is durable.
	Ack(ctx context.Context, msg M) error
	// Retry hands msg back for a redelivery after delay (a nak with delay,
	// a requeue). A transport without delayed redelivery implements
	// Delayer and reports false; the engine then waits the delay itself,
	// the message kept alive, and calls Retry with zero.
	Retry(ctx context.Context, msg M, delay time.Duration) error
	// DeadLetter moves msg to the dead-letter destination with dl's
	// headers and settles the original; it returns only once the dead
	// letter is durable. On error the original is left unsettled and the
	// engine retries it after the back-off.
	DeadLetter(ctx context.Context, msg M, dl DeadLetter) error
}

// Transport is a Settler that also receives: what a broker adapter gives a
// Consumer, which schedules what Receive returns.
type Transport[M any] interface {
	// Receive blocks until at least one delivery is available and returns
	// at most n, or returns ctx's error once ctx ends. Any other error is
	// reported (the guard's observer, idem.ErrorObserver) and Receive is called again after the
	// back-off, unless it wraps ErrClosed: then Run returns it.
	Receive(ctx context.Context, n int) ([]M, error)
	Settler[M]
}

// Delivery is what the broker says of one delivery.
type Delivery struct {
	// Attempt is the broker's delivery count, 1 for the first delivery
	// (where the broker keeps none: how many times this process tried).
	Attempt int
	// Last marks the broker's last allowed delivery: handed back, it would
	// be dropped or dead-lettered by the broker without idem's headers. A
	// Last delivery is never handed back for a retry; it is held, or
	// dead-lettered with ReasonMaxDeliver.
	Last bool
}

// DeadLetter is what a transport writes on a dead letter.
type DeadLetter struct {
	Reason  string            // the idem.HeaderReason value
	Headers map[string]string // idem's headers (DeadLetterHeaders), by name
	Attempt int               // the delivery's Attempt
}

// ErrClosed is wrapped by a Transport's Receive when it can never deliver
// again (the connection or the consumer is gone): Run returns the error.
var ErrClosed = errors.New("broker: transport closed")

// ErrLockLost is wrapped by a KeepAliver's error when the broker has taken
// the delivery back (a Service Bus lock lost): the handler's context is
// cancelled with it and the delivery is not settled (the broker
// redelivers it; its record decides again).
var ErrLockLost = errors.New("broker: delivery lock lost")
