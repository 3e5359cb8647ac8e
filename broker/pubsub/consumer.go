package pubsubidem

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Options configure a Consumer. DeadLetter is required. The scope and the
// key are the guard's (idem.Options.Scope, filled by NewGuard, and
// idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many messages are handled at once (broker.Options).
	// Default 1.
	Concurrency int
	// Backoff is how long a transiently failed message waits in the consumer,
	// its ack deadline extended, before it is nacked (a nack cannot be
	// delayed), and a held message's claim pace (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere is
	// held (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the dead-letter policy's MaxDeliveryAttempts: a retry
	// on the delivery whose DeliveryAttempt reaches it is dead-lettered by the
	// consumer with idem's attributes, not forwarded by Pub/Sub; without a
	// policy it counts the handler's failures in the record, two-phase mode
	// only (broker.Options).
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[*Message]

	// DeadLetter publishes to the dead-letter topic: conflicts, permanent
	// failures, messages without a usable key, parked records and
	// messages that failed MaxDeliveries times, each with its data, its
	// attributes and idem's. It may be the topic of the subscription's
	// dead-letter policy.
	DeadLetter *pubsub.Publisher
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*Message], error) {
	e := broker.Options[*Message]{
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

// Handler is the work a Consumer runs for each message: Handle
// (two-phase) or HandleTx (transactional inbox).
type Handler = broker.Handler[*Message]

// ReasonMaxDeliver is broker.ReasonMaxDeliver: the dead-letter reason of
// a message retried on its last delivery (DeliveryAttempt >=
// MaxDeliveries), or whose handler failed MaxDeliveries times.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// ErrLockLost is broker.ErrLockLost, the cause of a handler's context
// cancelled because the message stayed in the consumer past the client's
// ReceiveSettings.MaxExtension: the client no longer extends its ack
// deadline, so Pub/Sub delivers it again and its record decides there.
var ErrLockLost = broker.ErrLockLost

// Consumer runs a Handler for the messages of a subscription, received by
// the client library's streaming pull (Subscriber.Receive), on idem's
// consumer engine (broker.Consumer).
type Consumer struct {
	t       *transport
	eng     *broker.Consumer[*Message]  // Run's scheduler
	proc    *broker.Processor[*Message] // its processor: Process, and a last delivery handed over late
	running atomic.Bool
}

// NewConsumer returns a consumer of sub running h for each message under
// g. Build g with NewGuard, whose scope defaults to the subscription.
//
// A nil subscriber, guard, handler or dead-letter publisher, a
// ReceiveSettings.MaxExtension below zero (the client would not extend
// ack deadlines while a message is handled or held), a HandleTx handler
// whose Tx the guard's store has no transactions for, and negative options
// are refused with an error wrapping idem.ErrInvalidOptions.
func NewConsumer(sub *pubsub.Subscriber, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	switch {
	case sub == nil:
		return nil, fmt.Errorf("%w: pubsubidem: nil subscriber", idem.ErrInvalidOptions)
	case opts.DeadLetter == nil:
		return nil, fmt.Errorf("%w: pubsubidem: Options.DeadLetter is required (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	case sub.ReceiveSettings.MaxExtension < 0:
		return nil, fmt.Errorf("%w: pubsubidem: ReceiveSettings.MaxExtension below zero: ack deadlines must be extended while a message is handled or held", idem.ErrInvalidOptions)
	}
	maxExt := sub.ReceiveSettings.MaxExtension
	if maxExt == 0 {
		maxExt = pubsub.DefaultReceiveSettings.MaxExtension
	}
	t := &transport{sub: sub, dl: opts.DeadLetter, maxDeliveries: opts.MaxDeliveries, maxExt: maxExt}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	eng, err := broker.NewConsumer[*Message](t, g, h, eo)
	if err != nil {
		return nil, err
	}
	return &Consumer{t: t, eng: eng, proc: eng.Processor()}, nil
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, sub *pubsub.Subscriber, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(sub, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// ErrRunning is returned by Run while another Run of the same Consumer is
// active: the client allows one Receive per Subscriber.
var ErrRunning = errors.New("pubsubidem: Run already in progress")

// Run receives and handles messages until ctx ends, then shuts down
// gracefully (broker.Consumer.Run): it stops receiving (what the client
// had handed over and no worker took is nacked, a last delivery among
// them handled instead), nacks held messages and those
// waiting on their back-off, waits for the in-flight handlers (cancelling
// their contexts after ShutdownTimeout; a message on its last delivery is
// held until then, and dead-lettered by the consumer rather than nacked),
// waits for the client's Receive to send the last acks and returns nil.
// It returns an error wrapping broker.ErrClosed when the client's Receive
// ends on its own (the subscription deleted, the client closed).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	ended, end := context.WithCancel(context.Background())
	r := &receiving{in: make(chan *Message), done: make(chan struct{}), ended: ended}
	c.t.cur.Store(r)
	rctx, stop := context.WithCancel(ctx)
	go func() {
		defer end()
		defer close(r.done)
		r.err = c.t.sub.Receive(rctx, func(cctx context.Context, m *pubsub.Message) {
			msg := &Message{Message: m, Received: time.Now()}
			select {
			case r.in <- msg:
			case <-cctx.Done():
				// Receiving ended before the engine took it: handed back,
				// unless it is the last delivery (Pub/Sub would forward it
				// without idem's attributes), which is handled here
				// instead, within ShutdownTimeout.
				if !c.t.Delivery(msg).Last {
					m.Nack()
					return
				}
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.eng.Options().ShutdownTimeout)
				c.proc.Process(pctx, msg)
				cancel()
			}
		})
	}()
	err := c.eng.Run(ctx)
	stop()
	<-r.done
	c.t.cur.Store(nil) // a Process after Run waits for its acks' answers again
	return err
}

// Process handles one message and settles it, with the hooks of
// Options.Hooks; Run runs the same flow for every message. It is for
// programs that run their own Receive: call it once per message, from
// the Receive callback or any goroutine, as
// c.Process(ctx, &pubsubidem.Message{Message: m, Received: time.Now()}).
// A message whose key is in progress elsewhere, or whose store cannot be
// reached, is held inline, its ack deadline extended by the client.
func (c *Consumer) Process(ctx context.Context, m *Message) broker.Report {
	return c.proc.Process(ctx, m)
}
