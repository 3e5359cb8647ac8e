package amqpidem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Options configure a Consumer. Queue and a dead-letter destination
// (DeadLetterExchange, DeadLetterRoutingKey or both) are required; the zero
// value of every other field is a sensible default. The scope and the key
// are the guard's (idem.Options.Scope, filled by NewGuard, and
// idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Queue is the queue to consume.
	Queue string
	// ConsumerTag names the AMQP consumer. Default: generated, unique.
	ConsumerTag string
	// Concurrency is how many deliveries are handled at once. Default 1.
	Concurrency int
	// Prefetch is the channel's QoS prefetch count: deliveries in flight,
	// buffered or held for a retry back-off. Default 2*Concurrency.
	Prefetch int
	// DeadLetterExchange and DeadLetterRoutingKey say where conflicts,
	// permanent failures, messages without a usable key and parked records
	// are published. The empty exchange is AMQP's default exchange, which
	// routes to the queue named by the routing key; an empty routing key
	// reuses the delivery's. Declare and bind the dead-letter queue before
	// consuming: an unroutable dead letter is dropped by the broker.
	DeadLetterExchange   string
	DeadLetterRoutingKey string
	// Publisher is the channel dead letters are published on; it is put in
	// confirm mode. Default: the consuming channel. A separate channel keeps
	// a misconfigured dead-letter exchange (publishing to a missing exchange
	// closes the channel) from stopping consumption; dead letters then fail
	// and their deliveries are requeued until it is fixed.
	Publisher *amqp.Channel
	// Backoff gives how long a retried delivery is held before it is
	// requeued, from its attempt number (x-delivery-count + 1 on quorum
	// queues; 1 or, when redelivered, 2 on classic queues), and the pace at
	// which a held delivery is claimed again (from its round). Default
	// idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff). A key
	// in progress elsewhere is not retried on this back-off: see MaxHold.
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a delivery whose key is in progress elsewhere
	// is held before it is requeued. Held, it is not requeued, so it adds
	// nothing to a quorum queue's x-delivery-count (nor to its
	// delivery-limit): the consumer claims the key again on the back-off,
	// at the latest when the holder's lease ends (then a crashed holder's
	// claim is retaken as stale). Past MaxHold, or when Run shuts down, it
	// is requeued at once. On its MaxDeliveries-th delivery it is held
	// without bound. Held deliveries count against the prefetch, not the
	// Concurrency workers; keep MaxHold well under the broker's
	// consumer_timeout (30 minutes by default), past which RabbitMQ closes
	// the channel. Default DefaultMaxHold; negative: never claimed again
	// (the delivery waits until the holder's lease ends, then is
	// requeued).
	MaxHold time.Duration
	// MaxDeliveries, if positive, dead-letters (reason ReasonMaxDeliver) a
	// delivery that would be retried on its MaxDeliveries-th attempt. It
	// needs attempt counts, so quorum queues: set it at or below the queue's
	// delivery-limit, past which RabbitMQ dead-letters the message itself,
	// without idem's reason headers (or drops it when the queue has no
	// dead-letter exchange). A key in progress elsewhere is held instead
	// (see MaxHold): it is dead-lettered so only when a shutdown outlasts
	// ShutdownTimeout during that hold.
	MaxDeliveries int
	// ShutdownTimeout bounds how long Run waits for in-flight handlers after
	// its context ends before cancelling their contexts (it still waits for
	// them to return). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in the flow of each delivery (see
	// broker.Hooks): BeforeSettle once the outcome is known and before the
	// ack, the requeue (and the back-off hold before it) or the dead
	// letter; OnDeadLetter once a dead letter is confirmed by the broker
	// (alert on conflicts there); AfterSettle after the action, with
	// BrokerErr set when it failed; OnError for the errors the consumer
	// handles by itself (failed dead-letter publishes, which are retried,
	// and requeues on shutdown). A held delivery yields one Report, when it
	// is settled. Hooks run on the goroutine that handled the delivery and
	// must be safe for concurrent use.
	Hooks broker.Hooks[amqp.Delivery]
}

// Default back-off bounds for requeueing a retried delivery (Options.Backoff).
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// DefaultMaxHold is the default of Options.MaxHold.
const DefaultMaxHold = 5 * time.Minute

// ReasonMaxDeliver is broker.ReasonMaxDeliver, the dead-letter reason of a
// delivery that would be retried once more than Options.MaxDeliveries
// allows.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// ErrDeliveriesClosed is returned by Run when the broker or the connection
// stops the deliveries (channel or connection closed, queue deleted,
// consumer cancelled by the server). Reconnect and run again; unacked
// deliveries are requeued by the broker.
var ErrDeliveriesClosed = errors.New("amqpidem: deliveries closed")

// Consumer runs a Handler for the deliveries of one queue.
type Consumer struct {
	ch   *amqp.Channel
	pub  *amqp.Channel
	g    *idem.Guard
	opts Options
	drv  consume.Driver[amqp.Delivery]
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
	case opts.Concurrency < 0 || opts.Prefetch < 0 || opts.ShutdownTimeout < 0 || opts.MaxDeliveries < 0:
		return nil, fmt.Errorf("%w: amqpidem: negative Concurrency, Prefetch, MaxDeliveries or ShutdownTimeout", idem.ErrInvalidOptions)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = 2 * opts.Concurrency
	}
	if opts.ConsumerTag == "" {
		opts.ConsumerTag = fmt.Sprintf("idem-%.200s-%016x", opts.Queue, rand.Uint64())
	}
	if opts.Backoff == nil {
		opts.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.MaxHold == 0 {
		opts.MaxHold = DefaultMaxHold
	}
	pub := opts.Publisher
	if pub == nil {
		pub = ch
	}
	return &Consumer{ch: ch, pub: pub, g: g, opts: opts,
		drv: consume.Driver[amqp.Delivery]{Handler: h, Guard: g, Backoff: opts.Backoff, MaxHold: opts.MaxHold}}, nil
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
// cancels the AMQP consumer, requeues the deliveries received but not
// started, requeues held retries and held in-progress keys at once (a
// MaxDeliveries-th delivery is held on until ShutdownTimeout), waits for
// the in-flight handlers (cancelling their contexts after ShutdownTimeout)
// and returns nil.
//
// If the channel or connection closes under it, Run finishes its handlers
// (their acks fail; the broker requeues the deliveries) and returns an error
// wrapping ErrDeliveriesClosed. Run does not reconnect.
//
// Several consumers, on one channel each, may consume one queue: they
// compete for its messages. A Consumer runs once at a time (its consumer
// tag is fixed); after ErrDeliveriesClosed, make a new one on a new channel.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpidem: set prefetch: %w", err)
	}
	if err := c.pub.Confirm(false); err != nil {
		return fmt.Errorf("amqpidem: confirm mode for dead letters: %w", err)
	}
	closed := c.ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := c.ch.Consume(c.opts.Queue, c.opts.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpidem: consume %s: %w", c.opts.Queue, err)
	}

	// stop ends when the receive loop does (ctx ended or the deliveries
	// closed); flush once the consumer is cancelled: held deliveries are
	// requeued then, so that the broker hands them to other consumers.
	// Handlers outlive both; workCtx ends ShutdownTimeout after flush.
	stopCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	flush := make(chan struct{})
	var wg sync.WaitGroup
	done := func(broker.Report) {}
	// A held retry waits in a goroutine of its own, so its worker moves on;
	// the prefetch still bounds how many deliveries are out.
	hold := func(delay time.Duration, then func()) {
		wg.Add(1) // the calling worker is still counted: never from zero
		go func() {
			defer wg.Done()
			consume.Sleep(delay, flush)
			then()
		}()
	}
	// A delivery whose key is in progress elsewhere is held the same way
	// and comes back through again, for a worker to claim it again.
	again := make(chan *pending)
	var holdClaim func(p *pending, wait time.Duration)
	claim := func(p *pending) {
		if wait, held := c.drv.Claim(workCtx, p); held {
			wg.Add(1)
			go holdClaim(p, wait)
			return
		}
		c.act(workCtx, p, hold, done)
	}
	holdClaim = func(p *pending, wait time.Duration) {
		defer wg.Done()
		until := time.Now().Add(wait)
		if stopCtx.Err() == nil && consume.Sleep(wait, stopCtx.Done()) {
			select {
			case again <- p:
				return
			case <-stopCtx.Done():
			}
		}
		// Shutting down: requeued once the consumer is cancelled, unless
		// this is its last delivery: that is held on, and claimed here,
		// until workCtx ends.
		<-flush
		c.drv.Resume(workCtx, flush, p, time.Until(until), true)
		c.act(workCtx, p, hold, done)
	}
	// A fixed pool of workers: their stacks stay grown, where a goroutine
	// per delivery would grow a fresh stack through the guard every time.
	work := make(chan amqp.Delivery) // handed only to an idle worker
	for range c.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case d, ok := <-work:
					if !ok {
						return
					}
					if ctx.Err() != nil {
						// Shutdown began as d was handed over (a ready worker
						// and a cancelled ctx race in the select below): it
						// goes back untouched, like the prefetched ones.
						c.requeue(d)
						continue
					}
					claim(c.pending(d))
				case p := <-again:
					if stopCtx.Err() != nil {
						wg.Add(1)
						go holdClaim(p, 0)
						continue
					}
					claim(p)
				}
			}
		}()
	}
	var runErr error
loop:
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				runErr = c.closedErr(closed)
				break loop
			}
			if ctx.Err() != nil {
				c.requeue(d) // not started
				break loop
			}
			select {
			case work <- d:
			case <-ctx.Done():
				c.requeue(d) // not started
				break loop
			}
		case <-ctx.Done():
			break loop
		}
	}
	stopRun()
	close(work)

	if runErr == nil {
		// Stop the broker sending; what it sent already is requeued untouched.
		if err := c.ch.Cancel(c.opts.ConsumerTag, false); err != nil {
			c.reportErr(fmt.Errorf("amqpidem: cancel consumer %s: %w", c.opts.ConsumerTag, err))
		}
		for d := range deliveries {
			c.requeue(d)
		}
	}
	close(flush)
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelWork)
	wg.Wait()
	t.Stop()
	return runErr
}

// requeue hands d back untouched, on shutdown.
func (c *Consumer) requeue(d amqp.Delivery) {
	if err := d.Nack(false, true); err != nil {
		c.reportErr(fmt.Errorf("amqpidem: requeue on shutdown: %w", err))
	}
}

func (c *Consumer) reportErr(err error) { c.opts.Hooks.CallOnError(err) }

func (c *Consumer) closedErr(closed <-chan *amqp.Error) error {
	select {
	case e, ok := <-closed:
		if ok && e != nil {
			return fmt.Errorf("%w: queue %s: %w", ErrDeliveriesClosed, c.opts.Queue, e)
		}
	default:
	}
	return fmt.Errorf("%w: queue %s", ErrDeliveriesClosed, c.opts.Queue)
}
