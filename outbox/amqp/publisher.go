// Package outboxamqp publishes an outbox to RabbitMQ (amqp091-go): each
// record is published to its Destination exchange with its RoutingKey, on
// a channel in confirm mode, and confirmed by the broker's publisher
// confirm.
//
//	import outboxamqp "github.com/idemgo/idem/outbox/amqp"
//
//	pub, _ := outboxamqp.New(conn, outboxamqp.Options{})
//	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
//
// A record travels as broker/amqp's Publish sends a message, so the
// consumer side needs nothing of its own: the stable id is the MessageId
// property, which amqpidem.MessageOf reads as idem.Message.ID; delivery is
// persistent; x-deduplication-header (amqpidem.HeaderDedup) is
// idem.DedupID of the id and the content, for the deduplication plugin
// where it is enabled, so it never drops an id reused with other content.
// A Content-Type header becomes the content-type property.
//
// Messages are published mandatory: one that no queue is bound to take
// comes back (basic.return) and is retried with back-off rather than
// confirmed and lost. An exchange that does not exist is found with a
// passive declare before any message goes to it, so it fails only its own
// records (retried until an operator declares it) instead of closing the
// channel under the others. A message over Options.MaxMessageSize, what
// the broker would refuse, is outbox.Reject'ed: the relay parks it. A nack
// (a full queue with overflow reject-publish, an internal error) is
// retried.
//
// The default exchange ("") is Destination DefaultExchange.
package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/outbox"
)

// DefaultExchange is the Destination naming RabbitMQ's default exchange,
// which routes to the queue named by the routing key.
const DefaultExchange = "amq.default"

// DefaultMaxMessageSize is RabbitMQ's default max_message_size (128 MiB).
const DefaultMaxMessageSize = 128 << 20

// Options configure a Publisher. The zero value works.
type Options struct {
	// Fingerprint computes the content digest of x-deduplication-header. It
	// sees the message as a consumer's guard does (amqpidem.MessageOf).
	// Default idem.PayloadFingerprint.
	Fingerprint idem.FingerprintFunc
	// MaxMessageSize is the broker's max_message_size: a body over it is
	// rejected without being sent. Default DefaultMaxMessageSize.
	MaxMessageSize int
	// AllowUnroutable publishes without the mandatory flag: a message no
	// queue takes is confirmed and dropped by the broker. Off by default.
	AllowUnroutable bool
	// ExchangeCheck is how long an exchange found by the passive declare is
	// trusted before it is checked again. Default 1m.
	ExchangeCheck time.Duration
}

// Publisher is an outbox.Publisher on one RabbitMQ connection. It opens
// its channels itself and reopens them after a channel error. It is safe
// for concurrent use; calls are serialized.
type Publisher struct {
	conn *amqp.Connection
	opts Options

	mu        sync.Mutex
	ch        *amqp.Channel
	returns   chan amqp.Return
	exchanges map[string]time.Time // checked to exist, when
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a publisher on conn, which the caller opens and closes.
func New(conn *amqp.Connection, opts Options) (*Publisher, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: outboxamqp.New with a nil connection", outbox.ErrInvalidOptions)
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = idem.PayloadFingerprint
	}
	if opts.MaxMessageSize <= 0 {
		opts.MaxMessageSize = DefaultMaxMessageSize
	}
	if opts.ExchangeCheck <= 0 {
		opts.ExchangeCheck = time.Minute
	}
	return &Publisher{conn: conn, opts: opts, exchanges: map[string]time.Time{}}, nil
}

// Publishing is the AMQP message a record is published as.
func (p *Publisher) Publishing(r outbox.Record) (amqp.Publishing, error) {
	m := amqp.Publishing{MessageId: r.ID, Body: r.Payload, DeliveryMode: amqp.Persistent, Timestamp: time.Now(),
		Headers: make(amqp.Table, len(r.Headers)+1)}
	for k, v := range r.Headers {
		if strings.EqualFold(k, "Content-Type") {
			m.ContentType = v
			continue
		}
		m.Headers[k] = v
	}
	fp, err := p.opts.Fingerprint(amqpidem.MessageOf(amqp.Delivery{Headers: m.Headers, Body: m.Body, ContentType: m.ContentType, MessageId: r.ID}))
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("outboxamqp: fingerprint of %s: %w", r.ID, err)
	}
	m.Headers[amqpidem.HeaderDedup] = idem.DedupID(r.ID, fp)
	return m, nil
}

// exchange is the AMQP exchange of a Destination.
func exchange(dest string) string {
	if dest == DefaultExchange {
		return ""
	}
	return dest
}

// channel returns the confirm-mode channel, opening one if needed.
func (p *Publisher) channel() (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	ch, err := p.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("outboxamqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("outboxamqp: confirm mode: %w", err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 4096))
	p.ch = ch
	return ch, nil
}

// checkExchange declares name passively on a channel of its own, so that a
// missing exchange closes that channel and not the publishing one.
func (p *Publisher) checkExchange(name string) error {
	if name == "" || time.Since(p.exchanges[name]) < p.opts.ExchangeCheck {
		return nil
	}
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("outboxamqp: open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil); err != nil {
		return fmt.Errorf("outboxamqp: exchange %q: %w", name, err)
	}
	p.exchanges[name] = time.Now()
	return nil
}

// Publish implements outbox.Publisher: every record is published, then
// every confirm awaited; a returned (unroutable) record is an error.
// RabbitMQ cannot schedule (without a plugin): a record with a NotBefore
// time gets an *outbox.ScheduleError (the relay parks it) and is not
// published.
func (p *Publisher) Publish(ctx context.Context, recs []outbox.Record) []error {
	return outbox.Unscheduled("outboxamqp", recs, func(recs []outbox.Record) []error { return p.publish(ctx, recs) })
}

func (p *Publisher) publish(ctx context.Context, recs []outbox.Record) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(recs))
	fail := func(i int, err error) {
		errs[i] = fmt.Errorf("outboxamqp: publish %s to %q: %w", recs[i].ID, recs[i].Destination, err)
	}
	missing := map[string]error{}
	confirms := make([]*amqp.DeferredConfirmation, len(recs))
	byID := make(map[string]int, len(recs))
	for i, r := range recs {
		byID[r.ID] = i
		if len(r.Payload) > p.opts.MaxMessageSize {
			errs[i] = outbox.Reject(fmt.Errorf("outboxamqp: publish %s: body of %d bytes over the broker's max_message_size %d",
				r.ID, len(r.Payload), p.opts.MaxMessageSize))
			continue
		}
		ex := exchange(r.Destination)
		err, checked := missing[ex]
		if !checked {
			err = p.checkExchange(ex)
			missing[ex] = err
		}
		if err != nil {
			fail(i, err)
			continue
		}
		m, err := p.Publishing(r)
		if err != nil {
			errs[i] = outbox.Reject(err)
			continue
		}
		ch, err := p.channel()
		if err != nil {
			fail(i, err)
			continue
		}
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, ex, r.RoutingKey, !p.opts.AllowUnroutable, false, m)
		if err != nil {
			fail(i, err)
		}
	}
	// Returns are read while the confirms are awaited (a full returns
	// channel would stall the connection's reader, and with it the
	// confirms); a return precedes its message's confirm, so once every
	// confirm is in, so is every return.
	returned := make(chan map[string]amqp.Return, 1)
	stop := make(chan struct{})
	go func(rets chan amqp.Return) {
		got := map[string]amqp.Return{}
		for {
			select {
			case ret := <-rets:
				got[ret.MessageId] = ret
				continue
			case <-stop:
			}
			for {
				select {
				case ret := <-rets:
					got[ret.MessageId] = ret
					continue
				default:
				}
				returned <- got
				return
			}
		}
	}(p.returns)
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		ok, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			fail(i, err)
		case !ok:
			fail(i, errors.New("nacked by the broker (or the channel closed)"))
		}
	}
	close(stop)
	for id, ret := range <-returned {
		if i, ok := byID[id]; ok && errs[i] == nil {
			fail(i, fmt.Errorf("returned unroutable (%d %s): no queue is bound to take it", ret.ReplyCode, ret.ReplyText))
		}
	}
	return errs
}

// Close closes the publisher's channel (not the connection).
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		return nil
	}
	err := p.ch.Close()
	p.ch = nil
	return err
}
