package servicebus

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Options configure a Consumer. The zero value of every field is a
// sensible default. The scope and the key are the guard's
// (idem.Options.Scope, filled by NewGuard, and idem.Options.Key over
// MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many messages are handled at once (broker.Options).
	// Default 1.
	Concurrency int
	// Backoff is how long a transiently failed message waits, its lock
	// renewed, before it is abandoned (Service Bus redelivers it at once),
	// from its DeliveryCount, and a held message's claim pace
	// (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere is
	// held, its lock renewed, before it is abandoned (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the entity's MaxDeliveryCount: a retry on the delivery
	// with DeliveryCount >= MaxDeliveries is dead-lettered by the consumer
	// (reason max_deliver, idem's properties), not by Service Bus
	// (broker.Options). 0: unknown.
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[*azservicebus.ReceivedMessage]

	// EntityPath names the queue or subscription in the dead letters'
	// Idem-Entity property (see EntityPath).
	EntityPath string
	// LockRenewal is how often the message lock is renewed while the
	// message is in the consumer (handler, hold, back-off, store outage).
	// Default: a third of the lock's remaining time at receipt
	// (LockedUntil), at least 100ms. A session consumer renews the
	// session's lock at this pace.
	LockRenewal time.Duration
	// Sessions is how many sessions a SessionConsumer holds at once, each
	// handled one message at a time. Default: Concurrency. Unused by
	// Consumer.
	Sessions int
	// SessionIdleTimeout is how long a SessionConsumer keeps a session
	// that brings no message before it releases it for another.
	// Default DefaultSessionIdleTimeout. Unused by Consumer.
	SessionIdleTimeout time.Duration
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*azservicebus.ReceivedMessage], error) {
	e := broker.Options[*azservicebus.ReceivedMessage]{
		Concurrency:     o.Concurrency,
		Backoff:         o.Backoff,
		MaxHold:         o.MaxHold,
		MaxDeliveries:   o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout,
		Hooks:           o.Hooks,
	}
	err := e.Fill()
	o.Concurrency, o.Backoff, o.MaxHold, o.ShutdownTimeout = e.Concurrency, e.Backoff, e.MaxHold, e.ShutdownTimeout
	return e, err
}

// Default back-off bounds and hold (broker.Options).
const (
	DefaultMinBackoff = broker.DefaultMinBackoff
	DefaultMaxBackoff = broker.DefaultMaxBackoff
	DefaultMaxHold    = broker.DefaultMaxHold
)

// ReasonMaxDeliver is broker.ReasonMaxDeliver: the dead-letter reason of a
// message that would be abandoned on its last delivery (DeliveryCount >=
// Options.MaxDeliveries), or whose handler failed MaxDeliveries times.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// ErrLockLost is broker.ErrLockLost, the cause of a handler's context
// cancelled because Service Bus refused to renew the message's lock (it
// expired, or the message was settled elsewhere): Service Bus delivers it
// again, so the handler's work is settled by the record, not by this
// delivery. The cause also wraps the client's *azservicebus.Error.
var ErrLockLost = broker.ErrLockLost

// Consumer runs a Handler for the messages of a PeekLock receiver, on
// idem's consumer engine (broker.Consumer).
type Consumer struct {
	eng *broker.Consumer[*azservicebus.ReceivedMessage]
}

// NewConsumer returns a consumer of r, a receiver in PeekLock mode (the
// default) on a queue or a subscription, running h for each message under
// g. Build g with NewGuard, whose scope defaults to the entity path.
//
// A nil receiver, guard or handler, a HandleTx handler whose Tx the
// guard's store has no transactions for, and negative options are
// refused with an error wrapping idem.ErrInvalidOptions.
func NewConsumer(r *azservicebus.Receiver, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: servicebus: nil receiver", idem.ErrInvalidOptions)
	}
	if opts.LockRenewal < 0 {
		return nil, fmt.Errorf("%w: servicebus: negative LockRenewal", idem.ErrInvalidOptions)
	}
	t := &transport{r: r, entity: opts.EntityPath, maxDeliveries: opts.MaxDeliveries, lockRenewal: opts.LockRenewal}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	eng, err := broker.NewConsumer[*azservicebus.ReceivedMessage](t, g, h, eo)
	if err != nil {
		return nil, err
	}
	return &Consumer{eng: eng}, nil
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, r *azservicebus.Receiver, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(r, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run receives and handles messages until ctx ends, then shuts down
// gracefully (broker.Consumer.Run): it stops receiving, abandons held
// messages and those waiting on their back-off, waits for the in-flight
// handlers (cancelling their contexts after ShutdownTimeout; a message on
// its last delivery is held until then, and dead-lettered by the consumer
// rather than abandoned) and returns nil. It asks for no more messages
// than it has free workers, so none waits in the client with its lock
// running. It returns an error wrapping broker.ErrClosed if the receiver
// is closed under it.
func (c *Consumer) Run(ctx context.Context) error { return c.eng.Run(ctx) }

// Process handles one message and settles it, with the hooks of
// Options.Hooks; Run runs the same flow for every message. It is for
// programs that run their own receive loop: call it once per message
// received on the Consumer's receiver, from any goroutine. A message whose
// key is in progress elsewhere, or whose store cannot be reached, is held
// inline, its lock renewed (see Options.MaxHold).
func (c *Consumer) Process(ctx context.Context, msg *azservicebus.ReceivedMessage) broker.Report {
	return c.eng.Process(ctx, msg)
}
