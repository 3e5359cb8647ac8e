package amqpidem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Options configure a Consumer. Queue and a dead-letter destination
// (DeadLetterExchange, DeadLetterRoutingKey or both) are required; the zero
// value of every other field is a sensible default. The scope and the key
// are the guard's (idem.Options.Scope, filled by NewGuard, and
// idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many deliveries are handled at once (broker.Options).
	// Default 1.
	Concurrency int
	// Backoff is how long a retried delivery is held, unacked, before it is
	// requeued, from its attempt (x-delivery-count + 1 on quorum queues, 1 or,
	// when redelivered, 2 on classic ones), and a held delivery's claim pace
	// (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a delivery whose key is in progress elsewhere is
	// held, unacked (adding nothing to x-delivery-count), before it is
	// requeued (broker.Options). Keep it and the back-off well under the
	// broker's consumer_timeout (30 minutes by default): past it RabbitMQ
	// closes the channel.
	MaxHold time.Duration
	// MaxDeliveries is the handler failures before a max_deliver dead letter;
	// on a quorum queue, its delivery-limit (see the package doc)
	// (broker.Options).
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each delivery's flow (broker.Options).
	Hooks broker.Hooks[amqp.Delivery]

	// Queue is the queue to consume.
	Queue string
	// ConsumerTag names the AMQP consumer. Default: generated, unique.
	ConsumerTag string
	// Prefetch is the channel's QoS prefetch count: deliveries in flight,
	// buffered or held for a retry back-off. Default 2*Concurrency.
	Prefetch int
	// DeadLetterExchange and DeadLetterRoutingKey say where conflicts,
	// permanent failures, messages without a usable key, parked records and
	// max_deliver dead letters are published. The empty exchange is AMQP's
	// default exchange, which routes to the queue named by the routing key;
	// an empty routing key reuses the delivery's. Declare and bind the
	// dead-letter queue before consuming: an unroutable dead letter is
	// dropped by the broker.
	DeadLetterExchange   string
	DeadLetterRoutingKey string
	// Publisher is the channel dead letters are published on; it is put in
	// confirm mode. Default: the consuming channel. A separate channel keeps
	// a misconfigured dead-letter exchange (publishing to a missing exchange
	// closes the channel) from stopping consumption; dead letters then fail
	// and their deliveries are requeued until it is fixed.
	Publisher *amqp.Channel
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[amqp.Delivery], error) {
	e := broker.Options[amqp.Delivery]{
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

// ReasonMaxDeliver is broker.ReasonMaxDeliver, the dead-letter reason of a
// delivery that failed MaxDeliveries times, or that would be retried on
// the last delivery a quorum queue allows (RabbitMQ would drop it, or
// dead-letter it without idem's headers).
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// ErrDeliveriesClosed is returned by Run when the broker or the connection
// stops the deliveries (channel or connection closed, queue deleted,
// consumer cancelled by the server). Reconnect and run again; unacked
// deliveries are requeued by the broker. It wraps broker.ErrClosed.
var ErrDeliveriesClosed = fmt.Errorf("amqpidem: deliveries closed (%w)", broker.ErrClosed)

// Consumer runs a Handler for the deliveries of one queue on idem's
// consumer engine (broker.Consumer).
type Consumer struct {
	t        *transport
	eng      *broker.Consumer[amqp.Delivery]
	prefetch int
}

// NewConsumer returns a consumer of ch running h for each delivery of
// opts.Queue under g. Build g with NewGuard, whose scope defaults to the
// queue, the consumer's identity, and leave idem.Options.Key at its default
// (idem.MessageID, which reads the message-id property through MessageOf)
// or set it there.
//
// Everything is checked once, here: a nil channel, guard or handler, a
// HandleTx handler whose Tx the guard's store has no transactions for, a
// missing Queue or dead-letter destination, negative options, and dead
// letters routed back into Queue itself (the default exchange with Queue
// as DeadLetterRoutingKey) are refused with an error wrapping
// idem.ErrInvalidOptions (and idem.ErrNoTx for the Tx mismatch).
func NewConsumer(ch *amqp.Channel, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if ch == nil {
		return nil, fmt.Errorf("%w: amqpidem: nil channel", idem.ErrInvalidOptions)
	}
	if err := h.Check(g); err != nil {
		return nil, err
	}
	switch {
	case opts.Queue == "":
		return nil, fmt.Errorf("%w: amqpidem: Options.Queue is required", idem.ErrInvalidOptions)
	case opts.DeadLetterExchange == "" && opts.DeadLetterRoutingKey == "":
		return nil, fmt.Errorf("%w: amqpidem: a dead-letter destination is required (DeadLetterExchange and/or DeadLetterRoutingKey): conflicts are never dropped silently", idem.ErrInvalidOptions)
	case opts.DeadLetterExchange == "" && opts.DeadLetterRoutingKey == opts.Queue:
		return nil, fmt.Errorf("%w: amqpidem: DeadLetterRoutingKey %q through the default exchange is the consumed queue itself: dead letters would come back to it", idem.ErrInvalidOptions, opts.Queue)
	case opts.Prefetch < 0:
		return nil, fmt.Errorf("%w: amqpidem: negative Prefetch", idem.ErrInvalidOptions)
	}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = 2 * opts.Concurrency
	}
	if opts.ConsumerTag == "" {
		opts.ConsumerTag = fmt.Sprintf("idem-%.200s-%016x", opts.Queue, rand.Uint64())
	}
	pub := opts.Publisher
	if pub == nil {
		pub = ch
	}
	t := &transport{ch: ch, pub: pub, queue: opts.Queue, tag: opts.ConsumerTag,
		dlx: opts.DeadLetterExchange, dlKey: opts.DeadLetterRoutingKey,
		maxDeliveries: opts.MaxDeliveries}
	eng, err := broker.NewConsumer(t, g, h, eo)
	if err != nil {
		return nil, err
	}
	t.onError = eng.ReportError
	return &Consumer{t: t, eng: eng, prefetch: opts.Prefetch}, nil
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, ch *amqp.Channel, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(ch, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run consumes the queue until ctx ends, then shuts down gracefully: it
// cancels the AMQP consumer before handing anything back (so the broker
// gives it to other consumers), requeues the deliveries received or
// prefetched but not started, requeues held deliveries (a quorum queue's
// last allowed delivery is held on until ShutdownTimeout), waits for the
// in-flight handlers (cancelling their contexts after ShutdownTimeout) and
// returns nil.
//
// If the channel or connection closes under it, Run finishes its handlers
// (their acks fail; the broker requeues the deliveries) and returns an error
// wrapping ErrDeliveriesClosed. Run does not reconnect.
//
// Several consumers, on one channel each, may consume one queue: they
// compete for its messages. A Consumer runs once at a time (its consumer
// tag is fixed); after ErrDeliveriesClosed, make a new one on a new channel.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.t.start(ctx, c.prefetch); err != nil {
		return err
	}
	return c.eng.Run(ctx)
}

// Process handles one delivery and takes its broker action, with the hooks
// of Options.Hooks; Run does the same for every delivery. It is for
// programs that run their own consume loop: call it once per delivery of a
// channel with manual acks, and put the dead-letter channel in confirm mode
// (Confirm(false)) first so a dead letter is confirmed before the original
// is acked. A retried delivery is held for its back-off (or until ctx ends)
// before the requeue, and a delivery whose key is in progress elsewhere, or
// whose store cannot be reached, is held while its key is claimed again,
// so Process blocks that long.
func (c *Consumer) Process(ctx context.Context, d amqp.Delivery) broker.Report {
	return c.eng.Process(ctx, d)
}
