package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Dead-letter application properties set by the consumer, beside idem's
// own (idem.DeadLetterHeaders: Idem-Reason, Idem-Error, the key, this
// message's fingerprint and, for a conflict or a parked record, the stored
// record's fingerprint, state, token, attempts and first-claim time) and
// Service Bus's DeadLetterReason (the idem reason) and
// DeadLetterErrorDescription (the error text). The original application
// properties stay as they were.
const (
	HeaderEntity         = "Idem-Entity"          // the queue or subscription (Options.EntityPath)
	HeaderMessageID      = "Idem-Message-Id"      // the original MessageID, as it was
	HeaderSequenceNumber = "Idem-Sequence-Number" // the original sequence number
	HeaderEnqueuedTime   = "Idem-Enqueued-Time"   // when the original was enqueued (RFC 3339, UTC)
	HeaderDeliveryCount  = "Idem-Delivery-Count"  // its delivery count when dead-lettered
)

// settleTimeout bounds a settlement once the handler's context has ended
// (shutdown): the outcome is known and should reach Service Bus.
const settleTimeout = 10 * time.Second

// minPoll keeps a held message from claiming in a tight loop.
const minPoll = 10 * time.Millisecond

// Process handles one message and settles it, with the hooks of
// Options.Hooks; Run calls it for every message. It is exported for
// programs that run their own receive loop: call it once per message
// received on the Consumer's receiver, from any goroutine. A message whose
// key is in progress elsewhere is held inline (see Options.MaxHold).
func (c *Consumer) Process(ctx context.Context, msg *azservicebus.ReceivedMessage) broker.Report {
	return c.process(ctx, ctx.Done(), msg)
}

func (c *Consumer) process(ctx context.Context, stop <-chan struct{}, msg *azservicebus.ReceivedMessage) broker.Report {
	attempt := max(int(msg.DeliveryCount), 1)
	last := c.opts.MaxDeliveryCount > 0 && attempt >= c.opts.MaxDeliveryCount
	im := MessageOf(msg)
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopRenew := c.renewLock(hctx, cancel, msg)
	defer stopRenew()

	var (
		res    idem.Result
		err    error
		start  time.Time
		rounds int
	)
	for {
		res, err = c.h.Run(hctx, c.g, im, msg)
		if !errors.Is(err, idem.ErrInProgress) || hctx.Err() != nil || (c.opts.MaxHold < 0 && !last) {
			break
		}
		// In progress elsewhere: hold the message, its lock renewed, and
		// claim again instead of abandoning it (which would add one to its
		// DeliveryCount for a message nobody failed).
		if start.IsZero() {
			start = time.Now()
		}
		rounds++
		wait := max(min(c.opts.Backoff(rounds), idem.RetryAfter(res, err, c.g.Options().Clock(), c.opts.Backoff(rounds))), minPoll)
		until := stop
		if last {
			until = hctx.Done()
		} else {
			left := c.opts.MaxHold - time.Since(start)
			if left <= 0 {
				break
			}
			wait = min(wait, left)
		}
		if !consume.Sleep(wait, until) {
			break
		}
	}
	r := broker.Decide(res, err, c.g.Options().Clock(), attempt, c.opts.Backoff)
	if r.Action == idem.ActionRetry && last {
		r.Action, r.Reason, r.Delay = idem.ActionDeadLetter, ReasonMaxDeliver, 0
	}
	if r.Action == idem.ActionRetry && !errors.Is(err, idem.ErrInProgress) && !errors.Is(context.Cause(hctx), ErrLockLost) {
		// Service Bus redelivers an abandoned message at once: the back-off
		// is spent here, with the lock renewed, unless shutting down. A
		// message whose lock is lost is available again already: waiting
		// would only keep a worker from it.
		consume.Sleep(r.Delay, stop)
	}
	// Renewals end before the settlement, which the client must not race
	// with a renewal of the same message.
	stopRenew()
	return c.settle(hctx, msg, im, res, err, r)
}

// settle takes the broker action of r, calling the hooks around it.
func (c *Consumer) settle(ctx context.Context, msg *azservicebus.ReceivedMessage, im idem.Message, res idem.Result, err error, r broker.Report) broker.Report {
	hooks := c.opts.Hooks
	hooks.CallBeforeSettle(ctx, msg, r)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	switch r.Action {
	case idem.ActionAck:
		r.BrokerErr = c.r.CompleteMessage(actx, msg, nil)
	case idem.ActionRetry:
		r.BrokerErr = c.r.AbandonMessage(actx, msg, nil)
	case idem.ActionDeadLetter:
		h := consume.DeadLetterHeaders(c.g, im, res, err, r.Reason)
		r.Reason = h[idem.HeaderReason]
		props := make(map[string]any, len(h)+5)
		for k, v := range h {
			props[k] = v
		}
		if c.opts.EntityPath != "" {
			props[HeaderEntity] = c.opts.EntityPath
		}
		props[HeaderMessageID] = msg.MessageID
		if msg.SequenceNumber != nil {
			props[HeaderSequenceNumber] = strconv.FormatInt(*msg.SequenceNumber, 10)
		}
		if msg.EnqueuedTime != nil {
			props[HeaderEnqueuedTime] = msg.EnqueuedTime.UTC().Format(time.RFC3339Nano)
		}
		props[HeaderDeliveryCount] = strconv.Itoa(int(msg.DeliveryCount))
		reason, desc := r.Reason, h[idem.HeaderError]
		r.BrokerErr = c.r.DeadLetterMessage(actx, msg, &azservicebus.DeadLetterOptions{
			Reason: &reason, ErrorDescription: &desc, PropertiesToModify: props,
		})
		if r.BrokerErr != nil {
			// Not dead-lettered: the message comes back when its lock
			// expires, and its record decides again.
			r.BrokerErr = fmt.Errorf("servicebus: dead-letter: %w", r.BrokerErr)
			hooks.CallOnError(r.BrokerErr)
			break
		}
		hooks.CallOnDeadLetter(ctx, msg, r)
	}
	if r.BrokerErr != nil && r.Action != idem.ActionDeadLetter {
		hooks.CallOnError(fmt.Errorf("servicebus: settle (%s): %w", r.Action, r.BrokerErr))
	}
	hooks.CallAfterSettle(ctx, msg, r)
	return r
}

// renewLock renews msg's lock until the returned function is called:
// every Options.LockRenewal, by default a third of the lock's remaining
// time, so that two renewals may fail before it runs out. A renewal that
// Service Bus refuses as lock lost cancels ctx with cause ErrLockLost, as a
// lost lease cancels the handler; other failures are retried on the next
// tick. The guard renews its own lease alongside (every Lease/3).
func (c *Consumer) renewLock(ctx context.Context, cancel context.CancelCauseFunc, msg *azservicebus.ReceivedMessage) (stop func()) {
	every := c.opts.LockRenewal
	if every == 0 {
		every = 10 * time.Second
		if msg.LockedUntil != nil {
			every = time.Until(*msg.LockedUntil) / 3
		}
		every = max(every, 100*time.Millisecond)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, every)
			err := c.r.RenewMessageLock(rctx, msg, nil)
			rcancel()
			var sbErr *azservicebus.Error
			if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeLockLost {
				cancel(ErrLockLost)
				return
			}
			if err != nil && ctx.Err() == nil {
				c.opts.Hooks.CallOnError(fmt.Errorf("servicebus: renew lock: %w", err))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
