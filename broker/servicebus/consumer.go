package servicebus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Options configure a Consumer. The zero value of every field is a
// sensible default. The scope and the key are the guard's
// (idem.Options.Scope, filled by NewGuard, and idem.Options.Key over
// MessageOf), never the consumer's.
type Options struct {
	// EntityPath names the queue or subscription in the dead letters'
	// Idem-Entity property (see EntityPath).
	EntityPath string
	// Concurrency is how many messages are handled at once. Default 1.
	Concurrency int
	// Backoff gives how long a transiently failed message waits, its lock
	// renewed, before it is abandoned (Service Bus redelivers an abandoned
	// message at once), from its DeliveryCount; and the pace at which a
	// message whose key is in progress elsewhere is claimed again. A
	// message whose lock is lost waits for nothing: it is available again
	// already. Default idem.ExponentialBackoff(DefaultMinBackoff,
	// DefaultMaxBackoff).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere
	// is held, its lock renewed, and claimed again on the back-off (at the
	// latest when the holder's lease ends) before it is abandoned. Held, it
	// adds nothing to its DeliveryCount, so a live duplicate never walks
	// it up to MaxDeliveryCount. On its last delivery (MaxDeliveryCount)
	// it is held without bound. Default DefaultMaxHold; negative: never
	// held.
	MaxHold time.Duration
	// MaxDeliveryCount is the entity's MaxDeliveryCount (Service Bus's
	// default is 10; 0: unknown). A message that would be abandoned on
	// that delivery is dead-lettered by the consumer instead, with reason
	// max_deliver and idem's properties, rather than by Service Bus with
	// MaxDeliveryCountExceeded and none.
	MaxDeliveryCount int
	// LockRenewal is how often the message lock is renewed while the
	// message is in the consumer (handler, hold, back-off). Default: a
	// third of the lock's remaining time at receipt (LockedUntil), at
	// least 100ms.
	LockRenewal time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight handlers
	// after its context ends before cancelling their contexts. Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in the flow of each message (see
	// broker.Hooks): BeforeSettle before the complete, abandon or dead
	// letter; OnDeadLetter once the dead letter is settled (alert on
	// conflicts there); AfterSettle after the action, with BrokerErr set
	// when it failed; OnError for receive errors and failed settlements.
	Hooks broker.Hooks[*azservicebus.ReceivedMessage]
}

// Default back-off bounds (Options.Backoff) and hold (Options.MaxHold).
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	DefaultMaxHold    = 5 * time.Minute
)

// ReasonMaxDeliver is broker.ReasonMaxDeliver: the dead-letter reason of a
// message that would be abandoned on its MaxDeliveryCount-th delivery.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// ErrLockLost is the cause of a handler's context cancelled because the
// message's lock could not be renewed (it expired, or the message was
// settled elsewhere): Service Bus will deliver it again, so the handler's
// work will be settled by the record, not by this delivery.
var ErrLockLost = errors.New("servicebus: message lock lost")

// Consumer runs a Handler for the messages of a PeekLock receiver.
type Consumer struct {
	r    *azservicebus.Receiver
	g    *idem.Guard
	h    Handler
	opts Options
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
	if err := h.Check(g); err != nil {
		return nil, err
	}
	if opts.Concurrency < 0 || opts.ShutdownTimeout < 0 || opts.MaxDeliveryCount < 0 || opts.LockRenewal < 0 {
		return nil, fmt.Errorf("%w: servicebus: negative Concurrency, ShutdownTimeout, MaxDeliveryCount or LockRenewal", idem.ErrInvalidOptions)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.Backoff == nil {
		opts.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if opts.MaxHold == 0 {
		opts.MaxHold = DefaultMaxHold
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	return &Consumer{r: r, g: g, h: h, opts: opts}, nil
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
// gracefully: it stops receiving, abandons held messages and those waiting
// on their back-off, waits for the in-flight handlers (cancelling their
// contexts after ShutdownTimeout; a message on its last delivery held for a
// live key is held until then) and returns nil. It asks for no more
// messages than it has free workers, so none waits in the client with its
// lock running. It returns an error if the receiver is closed under it.
func (c *Consumer) Run(ctx context.Context) error {
	stop := ctx.Done()
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	slots := make(chan struct{}, c.opts.Concurrency)
	var wg sync.WaitGroup
	var runErr error
loop:
	for {
		select {
		case slots <- struct{}{}:
		case <-stop:
			break loop
		}
		n := 1
	more:
		for n < c.opts.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		msgs, err := c.r.ReceiveMessages(ctx, n, nil)
		for range n - len(msgs) {
			<-slots
		}
		if err != nil && len(msgs) == 0 {
			if ctx.Err() != nil {
				break
			}
			var sbErr *azservicebus.Error
			if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeClosed {
				runErr = fmt.Errorf("servicebus: receive: %w", err)
				break
			}
			c.opts.Hooks.CallOnError(fmt.Errorf("servicebus: receive: %w", err))
			consume.Sleep(c.opts.Backoff(1), stop)
			continue
		}
		for _, msg := range msgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.process(workCtx, stop, msg)
			}()
		}
	}
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelWork)
	wg.Wait()
	t.Stop()
	return runErr
}
