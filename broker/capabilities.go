package broker

import (
	"context"
	"time"

	"github.com/idemgo/idem"
)

// The optional capabilities of a transport. Each is an interface a
// Settler or Transport may implement; capabilitiesOf reads them all, once,
// when a Processor is made, and nothing else probes for them.

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

// InPlace is implemented by transports whose Ack and Retry need no
// context of their own: they settle nothing at the broker (Kafka: the
// partition marks a record done from the report and retries it itself),
// or their client's calls take no context (RabbitMQ's Ack and Nack).
// Reporting true, the engine calls them with the delivery's context as it
// is (it may have ended), not one of its own bounded by the settle
// timeout (one allocation per delivery, more if the call waits on its
// Done). DeadLetter still gets its own.
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

// Returner is implemented by transports with a cheaper way than Retry to
// give a message back unhandled at a Consumer's shutdown (one received but
// not started, one held during a store outage). Without it, the Consumer
// calls Retry with no delay.
type Returner[M any] interface {
	Return(ctx context.Context, msg M) error
}

// Drainer is implemented by transports that buffer deliveries ahead of
// Receive (a prefetch): at shutdown the Consumer calls Drain once, after
// its last Receive, and gives back what it returns (Returner) so that
// other consumers get them at once.
type Drainer[M any] interface {
	Drain(ctx context.Context) []M
}

// capabilities are what a transport can do beyond the Settler contract.
type capabilities[M any] struct {
	keepAlive KeepAliver[M] // nil: deliveries need no keep-alive
	delays    bool          // Retry honours its delay (default: true)
	inPlace   bool          // Ack and Retry need no settle context
	runner    Runner[M]     // nil: handlers run as built
	returner  Returner[M]   // nil: a give-back is Retry(ctx, msg, 0)
	drainer   Drainer[M]    // nil: nothing is buffered ahead of Receive
}

func capabilitiesOf[M any](t any) capabilities[M] {
	c := capabilities[M]{delays: true}
	c.keepAlive, _ = t.(KeepAliver[M])
	if d, ok := t.(Delayer); ok {
		c.delays = d.RetryDelays()
	}
	if ip, ok := t.(InPlace); ok {
		c.inPlace = ip.SettlesInPlace()
	}
	c.runner, _ = t.(Runner[M])
	c.returner, _ = t.(Returner[M])
	c.drainer, _ = t.(Drainer[M])
	return c
}
