package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Dead-letter application properties set by the consumer, beside idem's
// own (broker.DeadLetterHeaders: Idem-Reason, Idem-Error, the key, this
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

// transport is the engine's view of a PeekLock receiver: it receives,
// completes, abandons, dead-letters and renews locks; the flow is the
// engine's.
type transport struct {
	r             *azservicebus.Receiver
	entity        string
	maxDeliveries int           // the entity's MaxDeliveryCount; 0: unknown
	lockRenewal   time.Duration // 0: a third of the lock at receipt
}

var (
	_ broker.Transport[*azservicebus.ReceivedMessage]  = (*transport)(nil)
	_ broker.KeepAliver[*azservicebus.ReceivedMessage] = (*transport)(nil)
	_ broker.Delayer                                   = (*transport)(nil)
)

// Receive asks for at most n messages: the engine asks for no more than it
// has free workers, so none waits in the client with its lock running.
func (t *transport) Receive(ctx context.Context, n int) ([]*azservicebus.ReceivedMessage, error) {
	msgs, err := t.r.ReceiveMessages(ctx, n, nil)
	if err == nil || len(msgs) > 0 {
		// Messages received before an error are handled; the error, if it
		// lasts, comes back on the next call.
		return msgs, nil
	}
	if sbCode(err) == azservicebus.CodeClosed {
		return nil, fmt.Errorf("servicebus: receive: %w: %w", broker.ErrClosed, err)
	}
	return nil, fmt.Errorf("servicebus: receive: %w", err)
}

func (t *transport) Message(msg *azservicebus.ReceivedMessage) idem.Message { return MessageOf(msg) }

// Delivery is the message's DeliveryCount; the last is the one at the
// entity's MaxDeliveryCount, which an abandon (or a lock expiry) would
// have Service Bus dead-letter with MaxDeliveryCountExceeded and none of
// idem's properties.
func (t *transport) Delivery(msg *azservicebus.ReceivedMessage) broker.Delivery {
	n := max(int(msg.DeliveryCount), 1)
	return broker.Delivery{Attempt: n, Last: t.maxDeliveries > 0 && n >= t.maxDeliveries}
}

func (t *transport) Ack(ctx context.Context, msg *azservicebus.ReceivedMessage) error {
	return t.r.CompleteMessage(ctx, msg, nil)
}

// Retry abandons msg: Service Bus makes it available again at once, with
// DeliveryCount + 1. The delay has been waited out by the engine
// (RetryDelays is false), the lock renewed.
func (t *transport) Retry(ctx context.Context, msg *azservicebus.ReceivedMessage, _ time.Duration) error {
	return t.r.AbandonMessage(ctx, msg, nil)
}

// RetryDelays reports false: an abandon cannot be delayed.
func (t *transport) RetryDelays() bool { return false }

// DeadLetter moves msg to the entity's dead-letter queue with
// DeadLetterReason and DeadLetterErrorDescription, idem's headers and the
// message's position as application properties.
func (t *transport) DeadLetter(ctx context.Context, msg *azservicebus.ReceivedMessage, dl broker.DeadLetter) error {
	return t.r.DeadLetterMessage(ctx, msg, deadLetterOptions(t.entity, msg, dl))
}

// deadLetterOptions are the DeadLetterMessage options of msg's dead
// letter: the reason and the error as DeadLetterReason and
// DeadLetterErrorDescription, idem's headers and msg's position (entity,
// MessageID, sequence number, enqueued time, delivery count) as
// application properties.
func deadLetterOptions(entity string, msg *azservicebus.ReceivedMessage, dl broker.DeadLetter) *azservicebus.DeadLetterOptions {
	props := make(map[string]any, len(dl.Headers)+5)
	for k, v := range dl.Headers {
		props[k] = v
	}
	if entity != "" {
		props[HeaderEntity] = entity
	}
	props[HeaderMessageID] = msg.MessageID
	if msg.SequenceNumber != nil {
		props[HeaderSequenceNumber] = strconv.FormatInt(*msg.SequenceNumber, 10)
	}
	if msg.EnqueuedTime != nil {
		props[HeaderEnqueuedTime] = msg.EnqueuedTime.UTC().Format(time.RFC3339Nano)
	}
	props[HeaderDeliveryCount] = strconv.Itoa(int(msg.DeliveryCount))
	reason, desc := dl.Reason, dl.Headers[idem.HeaderError]
	return &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc, PropertiesToModify: props}
}

// KeepAlive renews msg's lock. A renewal Service Bus refuses as lock lost
// wraps broker.ErrLockLost: the engine cancels the handler and leaves the
// message unsettled (it is available again already).
func (t *transport) KeepAlive(ctx context.Context, msg *azservicebus.ReceivedMessage) error {
	err := t.r.RenewMessageLock(ctx, msg, nil)
	switch {
	case err == nil:
		return nil
	case sbCode(err) == azservicebus.CodeLockLost:
		return fmt.Errorf("servicebus: renew lock: %w: %w", broker.ErrLockLost, err)
	}
	return fmt.Errorf("servicebus: renew lock: %w", err)
}

// KeepAliveEvery is Options.LockRenewal, by default a third of the lock's
// remaining time at receipt, so that two renewals may fail before it runs
// out. The guard renews its own lease alongside (every Lease/3).
func (t *transport) KeepAliveEvery(msg *azservicebus.ReceivedMessage) time.Duration {
	return renewEvery(t.lockRenewal, msg.LockedUntil)
}

// renewEvery is how often a lock ending at lockedUntil is renewed: set,
// by Options.LockRenewal; else a third of the lock's remaining time, at
// least 100ms (10s when the lock's end is unknown).
func renewEvery(set time.Duration, lockedUntil *time.Time) time.Duration {
	if set > 0 {
		return set
	}
	every := 10 * time.Second
	if lockedUntil != nil {
		every = time.Until(*lockedUntil) / 3
	}
	return max(every, 100*time.Millisecond)
}

// sbCode is the Service Bus error code of err, "" if it has none.
func sbCode(err error) azservicebus.Code {
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		return sbErr.Code
	}
	return ""
}
