package pubsubidem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Attributes a dead letter carries beside the original's and idem's
// (broker.DeadLetterHeaders: Idem-Reason, Idem-Error, the key, the
// fingerprints and, for a conflict or a parked record, the stored
// record's state, token, attempts and first-claim time).
const (
	HeaderSubscription    = "Idem-Subscription"      // the subscription's full name
	HeaderPosition        = "Idem-Original-Position" // the original's server message id
	HeaderPublishTime     = "Idem-Publish-Time"      // its publish time (RFC 3339, UTC)
	HeaderDeliveryAttempt = "Idem-Delivery-Attempt"  // its delivery attempt when dead-lettered
	HeaderOrderingKey     = "Idem-Ordering-Key"      // its ordering key, restored by Replay
)

// MaxAttributeValue is the longest attribute value Pub/Sub accepts, in
// bytes: idem's values on a dead letter are cut to it.
const MaxAttributeValue = 1024

// transport is the engine's view of a streaming pull: the client's
// Receive hands messages over one by one (receiving); the engine acks,
// nacks and dead-letters them. The client extends their ack deadlines
// while they are outstanding, up to ReceiveSettings.MaxExtension.
type transport struct {
	sub           *pubsub.Subscriber
	dl            *pubsub.Publisher
	maxDeliveries int
	maxExt        time.Duration
	cur           atomic.Pointer[receiving] // the current Run's
}

// receiving is one Run's hand-over from the client's Receive callbacks.
type receiving struct {
	in    chan *Message   // unbuffered: a message is the client's until taken
	done  chan struct{}   // closed when the client's Receive returned
	ended context.Context // done then too: the client answers no ack after it
	err   error           // its error, read after done
}

// errReceiveEnded cuts the wait for an ack's answer once the client's
// Receive has returned (the client closed: a crash, or the subscription
// gone): none will come.
var errReceiveEnded = errors.New("the client's Receive ended: no answer will come")

var (
	_ broker.Transport[*Message]  = (*transport)(nil)
	_ broker.KeepAliver[*Message] = (*transport)(nil)
	_ broker.Delayer              = (*transport)(nil)
)

// Receive takes one message from the client's callbacks, waiting for it,
// then as many as are waiting, up to n.
func (t *transport) Receive(ctx context.Context, n int) ([]*Message, error) {
	r := t.cur.Load()
	if r == nil {
		return nil, fmt.Errorf("%w: pubsubidem: not running", broker.ErrClosed)
	}
	var out []*Message
	select {
	case m := <-r.in:
		out = append(out, m)
	case <-r.done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: pubsubidem: receive from %s: %w", broker.ErrClosed, t.sub, r.err)
		}
		return nil, fmt.Errorf("%w: pubsubidem: receive from %s ended", broker.ErrClosed, t.sub)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < n {
		select {
		case m := <-r.in:
			out = append(out, m)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (t *transport) Message(m *Message) idem.Message { return MessageOf(m) }

// Delivery is the message's DeliveryAttempt (set by Pub/Sub on
// subscriptions with a dead-letter policy; 1 without one); the last is the
// one at Options.MaxDeliveries, which a nack (or an expired deadline)
// would have Pub/Sub forward to the policy's topic without idem's
// attributes.
func (t *transport) Delivery(m *Message) broker.Delivery {
	if m.DeliveryAttempt == nil {
		return broker.Delivery{Attempt: 1}
	}
	n := max(*m.DeliveryAttempt, 1)
	return broker.Delivery{Attempt: n, Last: t.maxDeliveries > 0 && n >= t.maxDeliveries}
}

// Ack acks m and waits for the outcome: on a subscription with
// exactly-once delivery, Pub/Sub's confirmation (an ack it refuses, its
// ack id expired, fails: the message comes back and its record makes it
// a duplicate); without it, the client reports success at once.
func (t *transport) Ack(ctx context.Context, m *Message) error {
	if err := t.result(ctx, m.AckWithResult()); err != nil {
		return fmt.Errorf("pubsubidem: ack %s: %w (it is delivered again, a duplicate)", m.ID, err)
	}
	return nil
}

// Retry nacks m: Pub/Sub delivers it again at once, or after the
// subscription's retry policy's back-off. The engine has waited out the
// delay (RetryDelays is false), the ack deadline extended.
func (t *transport) Retry(ctx context.Context, m *Message, _ time.Duration) error {
	err := t.result(ctx, m.NackWithResult())
	var ack *ackError
	if errors.As(err, &ack) && ack.status == pubsub.AcknowledgeStatusInvalidAckID {
		return nil // the deadline had passed: it is delivered again anyway
	}
	if err != nil {
		return fmt.Errorf("pubsubidem: nack %s: %w", m.ID, err)
	}
	return nil
}

// RetryDelays reports false: a nack cannot be delayed by the consumer
// (only the subscription's retry policy delays redeliveries, by its own
// back-off).
func (t *transport) RetryDelays() bool { return false }

// ackError is an ack or a nack Pub/Sub refused.
type ackError struct {
	status pubsub.AcknowledgeStatus
	err    error
}

func (e *ackError) Error() string {
	return fmt.Sprintf("status %d: %v", e.status, e.err)
}

func (e *ackError) Unwrap() error { return e.err }

// result waits for an ack's or a nack's outcome, until ctx ends or the
// current Run's Receive has returned.
func (t *transport) result(ctx context.Context, r *pubsub.AckResult) error {
	if cur := t.cur.Load(); cur != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(cur.ended, func() { cancel(errReceiveEnded) })
		defer stop()
	}
	st, err := r.Get(ctx)
	if err == nil && st == pubsub.AcknowledgeStatusSuccess {
		return nil
	}
	if err == nil {
		err = errors.New("not acknowledged")
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return context.Cause(ctx)
	}
	return &ackError{status: st, err: err}
}

// DeadLetter publishes m to the dead-letter topic with its data, its
// attributes, idem's (cut to MaxAttributeValue) and its position, waits
// until Pub/Sub stored it, then acks m. An ack that fails after the dead
// letter is stored leaves m to come back: it is dead-lettered again.
func (t *transport) DeadLetter(ctx context.Context, m *Message, dl broker.DeadLetter) error {
	out := &pubsub.Message{Data: m.Data, Attributes: deadLetterAttributes(t.sub.String(), m, dl)}
	if _, err := t.dl.Publish(ctx, out).Get(ctx); err != nil {
		return fmt.Errorf("pubsubidem: dead letter %s to %s: %w", m.ID, t.dl, err)
	}
	if err := t.result(ctx, m.AckWithResult()); err != nil {
		return fmt.Errorf("pubsubidem: dead letter %s stored, but its ack failed (it comes back and is dead-lettered again): %w", m.ID, err)
	}
	return nil
}

// deadLetterAttributes are the attributes of m's dead letter: m's own,
// then idem's headers and m's position over them.
func deadLetterAttributes(sub string, m *Message, dl broker.DeadLetter) map[string]string {
	a := make(map[string]string, len(m.Attributes)+len(dl.Headers)+5)
	for k, v := range m.Attributes {
		a[k] = v
	}
	for k, v := range dl.Headers {
		a[k] = attributeValue(v)
	}
	a[HeaderSubscription] = sub
	a[HeaderPosition] = m.ID
	if !m.PublishTime.IsZero() {
		a[HeaderPublishTime] = m.PublishTime.UTC().Format(time.RFC3339Nano)
	}
	a[HeaderDeliveryAttempt] = strconv.Itoa(dl.Attempt)
	if m.OrderingKey != "" {
		a[HeaderOrderingKey] = m.OrderingKey
	}
	return a
}

// attributeValue is s cut to MaxAttributeValue bytes at a character
// boundary (broker.HeaderText may end in an ellipsis past it).
func attributeValue(s string) string {
	if len(s) <= MaxAttributeValue {
		return s
	}
	cut := MaxAttributeValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// KeepAlive extends nothing itself: the client extends the ack deadline
// of every outstanding message, up to ReceiveSettings.MaxExtension after
// its receipt. It reports broker.ErrLockLost once m has been in the
// consumer that long, less one KeepAliveEvery: the client gives it up
// then and Pub/Sub delivers it again. m is nacked first, so that the
// client's flow control lets it go and the redelivery comes at once.
func (t *transport) KeepAlive(_ context.Context, m *Message) error {
	if m.Received.IsZero() || time.Since(m.Received)+t.KeepAliveEvery(m) < t.maxExt {
		return nil
	}
	m.Nack()
	return fmt.Errorf("%w: pubsubidem: message %s in the consumer for ReceiveSettings.MaxExtension (%s): its ack deadline is no longer extended", broker.ErrLockLost, m.ID, t.maxExt)
}

// KeepAliveEvery is a tenth of MaxExtension, between 100ms and 10s: a
// look at the clock, no call to Pub/Sub.
func (t *transport) KeepAliveEvery(*Message) time.Duration {
	return min(max(t.maxExt/10, 100*time.Millisecond), 10*time.Second)
}
