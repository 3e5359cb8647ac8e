package broker

import (
	"context"
	"errors"
	"time"

	"github.com/idemgo/idem"
)

// Transport is what a broker adapter gives the engine: how deliveries of
// type M arrive and how each is settled. The consumer flow (claiming,
// holding a key in progress elsewhere, the store-outage hold, deciding,
// the hooks, dead-letter headers, shutdown) is the engine's (Consumer);
// a transport only moves messages. See the package doc for the contract.
type Transport[M any] interface {
	// Receive blocks until at least one delivery is available and returns
	// at most n, or returns ctx's error once ctx ends. Any other error is
	// reported (Hooks.OnError) and Receive is called again after the
	// back-off, unless it wraps ErrClosed: then Run returns it.
	Receive(ctx context.Context, n int) ([]M, error)
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

// KeepAliver is implemented by transports whose broker redelivers a
// message left unsettled for too long (JetStream AckWait, a Service Bus
// lock, a Pub/Sub ack deadline): the engine calls KeepAlive every
// KeepAliveEvery(msg) while msg is handled, held in progress elsewhere, or
// held during a store outage, so that none of those spends a delivery.
type KeepAliver[M any] interface {
	KeepAlive(ctx context.Context, msg M) error
	// KeepAliveEvery is how often msg needs it; zero or less: never.
	KeepAliveEvery(msg M) time.Duration
}

// Delayer is implemented by transports that say whether Retry honours its
// delay. One that reports false (RabbitMQ's requeue, Service Bus's
// abandon) has the engine wait out the delay, the message kept alive,
// before Retry(ctx, msg, 0).
type Delayer interface {
	RetryDelays() bool
}

// Returner is implemented by transports with a cheaper way than Retry to
// give a message back unhandled at shutdown (one received but not
// started, one held during a store outage). Without it, the engine calls
// Retry with no delay.
type Returner[M any] interface {
	Return(ctx context.Context, msg M) error
}

// Drainer is implemented by transports that buffer deliveries ahead of
// Receive (a prefetch): at shutdown the engine calls Drain once, after its
// last Receive, and gives back what it returns (Returner) so that other
// consumers get them at once.
type Drainer[M any] interface {
	Drain(ctx context.Context) []M
}

// InPlace is implemented by transports whose Ack and Retry need no
// context of their own: they settle nothing at the broker (Kafka: the
// partition marks a record done from the report and retries it itself),
// or their client's calls take no context (RabbitMQ's Ack and Nack).
// Reporting true, the engine calls them with the delivery's context as it
// is (it may have ended), not one bounded by the settle timeout, which
// costs five allocations per delivery (a WithoutCancel, a timer context,
// its timer). DeadLetter still gets its own.
type InPlace interface {
	SettlesInPlace() bool
}

// Runner is implemented by transports that run some deliveries' handlers
// their own way: Kafka runs a partition's queued records under claims made
// ahead in one batch (Handler.RunTicket). The engine calls RunHandler in
// place of h.Run; everything around it (holds, deciding, settling) stays
// the engine's.
type Runner[M any] interface {
	RunHandler(ctx context.Context, h Handler[M], g *idem.Guard, im idem.Message, msg M) (idem.Result, error)
}
