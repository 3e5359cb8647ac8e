// Package outboxservicebus publishes an outbox to Azure Service Bus
// (azservicebus): the records of a relay batch are sent to their
// Destination queue or topic in message batches, one sender per
// destination, and confirmed by the send's disposition.
//
//	import outboxservicebus "github.com/idemgo/idem/outbox/servicebus"
//
//	client, _ := azservicebus.NewClient(namespace, cred, nil)
//	pub, _ := outboxservicebus.New(client, outboxservicebus.Options{})
//	defer pub.Close(ctx)
//	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
//
// A record travels as broker/servicebus's Send sends a message, so the
// consumer side needs nothing of its own: the stable id in the Idem-Id
// application property (servicebus.HeaderID), which servicebus.MessageOf
// reads as idem.Message.ID, and MessageID, which the entity's duplicate
// detection reads, set to idem.DedupID(id, fingerprint). Duplicate
// detection therefore drops a repeat of the same content (the relay
// publishing again after a crash between the send and its mark) but
// never an id reused with other content: that one reaches the consumer,
// whose guard dead-letters it as a conflict. Headers become application
// properties; a Content-Type header becomes the ContentType property.
//
// A record with a NotBefore time is sent at once as a scheduled message
// (ScheduledEnqueueTime): Service Bus holds it and delivers it from then
// on. With Options.Sessions, the destination's messages carry a SessionID
// (the routing key, else the ordering key), as a session-enabled queue or
// subscription requires.
//
// The relay publishes an ordering key's records in commit order, each once
// the one before is confirmed. Service Bus keeps that order strictly only
// within a session: on a plain queue a receiver's unused prefetched
// messages are released and come back behind later ones. Consumers that
// need a key's order use a session-enabled entity and Options.Sessions.
//
// Records that Service Bus would refuse for themselves (over the entity's
// maximum message size, a MessageID over 128 characters, no session id
// for a session entity) are outbox.Reject'ed, so the relay parks them;
// everything else (an entity that does not exist, a lost connection, a
// timeout, a throttled namespace) is retried.
package outboxservicebus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/outbox"
)

// MaxMessageIDLen is Service Bus's limit on MessageID, in characters.
const MaxMessageIDLen = 128

// Options configure a Publisher. The zero value works.
type Options struct {
	// Fingerprint computes the content digest in MessageID. It sees the
	// message as a consumer's guard does (servicebus.MessageOf: the id,
	// the application properties, the content type and the body). Give it
	// the consumers' idem.Options.Fingerprint when that is not the
	// default, idem.PayloadFingerprint: a coarser one would let duplicate
	// detection drop content they tell apart.
	Fingerprint idem.FingerprintFunc
	// Sessions gives every message a SessionID: the record's RoutingKey,
	// else its OrderingKey (a record with neither is rejected). Set it when
	// the destinations are session-enabled; the consumer then sees each
	// ordering key's messages in order, one session at a time.
	Sessions bool
}

// Publisher is an outbox.Publisher on one azservicebus.Client. It opens a
// sender per destination on first use and keeps it until Close. It is safe
// for concurrent use.
type Publisher struct {
	client *azservicebus.Client
	opts   Options

	mu      sync.Mutex
	senders map[string]*azservicebus.Sender
	closed  bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a publisher on client. The client stays the caller's: Close
// closes the publisher's senders, not the client.
func New(client *azservicebus.Client, opts Options) (*Publisher, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: outboxservicebus.New with a nil client", outbox.ErrInvalidOptions)
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = idem.PayloadFingerprint
	}
	return &Publisher{client: client, opts: opts, senders: map[string]*azservicebus.Sender{}}, nil
}

// ErrClosed is returned for records published after Close.
var ErrClosed = errors.New("outboxservicebus: publisher closed")

// Close closes the senders. Publish fails with ErrClosed afterwards.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	senders := p.senders
	p.senders, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, s := range senders {
		errs = append(errs, s.Close(ctx))
	}
	return errors.Join(errs...)
}

// Message is the Service Bus message a record is sent as: its headers as
// application properties, the stable id in Idem-Id, the dedup id in
// MessageID, NotBefore as ScheduledEnqueueTime and, with Options.Sessions,
// the SessionID. Its errors are refusals of the record itself.
func (p *Publisher) Message(r outbox.Record) (*azservicebus.Message, error) {
	m := &azservicebus.Message{Body: r.Payload, ApplicationProperties: make(map[string]any, len(r.Headers)+1)}
	for k, v := range r.Headers {
		if k == "Content-Type" {
			m.ContentType = &v
			continue
		}
		m.ApplicationProperties[k] = v
	}
	m.ApplicationProperties[servicebus.HeaderID] = r.ID
	fp, err := p.opts.Fingerprint(consumerView(r, m))
	if err != nil {
		return nil, fmt.Errorf("outboxservicebus: fingerprint of %s: %w", r.ID, err)
	}
	id := idem.DedupID(r.ID, fp)
	if n := len([]rune(id)); n > MaxMessageIDLen {
		return nil, fmt.Errorf("outboxservicebus: message %.80q: MessageID %q is %d characters, Service Bus's limit is %d (ids up to %d characters fit with the content digest)",
			r.ID, id, n, MaxMessageIDLen, MaxMessageIDLen-17)
	}
	m.MessageID = &id
	if !r.NotBefore.IsZero() {
		at := r.NotBefore
		m.ScheduledEnqueueTime = &at
	}
	if p.opts.Sessions {
		session := r.RoutingKey
		if session == "" {
			session = r.OrderingKey
		}
		if session == "" {
			return nil, fmt.Errorf("outboxservicebus: message %.80q has no routing key or ordering key to be its SessionID (Options.Sessions)", r.ID)
		}
		m.SessionID = &session
	}
	return m, nil
}

// consumerView is the idem.Message servicebus.MessageOf builds from m.
func consumerView(r outbox.Record, m *azservicebus.Message) idem.Message {
	im := idem.Message{ID: r.ID, Payload: r.Payload, Headers: make(map[string]string, len(m.ApplicationProperties))}
	for k, v := range m.ApplicationProperties {
		im.Headers[k] = v.(string)
	}
	if m.ContentType != nil {
		im.ContentType = *m.ContentType
	}
	return im
}

// Publish implements outbox.Publisher: the records are grouped by
// destination; each destination's are sent in as few message batches as
// fit the entity's size limit, the destinations at once. A batch's send
// confirms or fails all of its records.
func (p *Publisher) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	byDest := map[string][]int{}
	var order []string
	for i, r := range recs {
		if byDest[r.Destination] == nil {
			order = append(order, r.Destination)
		}
		byDest[r.Destination] = append(byDest[r.Destination], i)
	}
	var wg sync.WaitGroup
	for _, dest := range order {
		wg.Go(func() { p.publishTo(ctx, dest, recs, byDest[dest], errs) })
	}
	wg.Wait()
	return errs
}

// publishTo sends the records at idx, all to dest, and sets their errors.
func (p *Publisher) publishTo(ctx context.Context, dest string, recs []outbox.Record, idx []int, errs []error) {
	fail := func(is []int, err error) {
		for _, i := range is {
			errs[i] = fmt.Errorf("outboxservicebus: send %s to %s: %w", recs[i].ID, dest, err)
		}
	}
	s, err := p.sender(dest)
	if err != nil {
		fail(idx, err)
		return
	}
	var (
		batch *azservicebus.MessageBatch
		in    []int // the records in batch
	)
	send := func() bool {
		if batch == nil || len(in) == 0 {
			return true
		}
		err := s.SendMessageBatch(ctx, batch, nil)
		if err != nil {
			fail(in, classify(err))
		}
		batch, in = nil, nil
		return err == nil
	}
	for k, i := range idx {
		m, err := p.Message(recs[i])
		if err != nil {
			errs[i] = outbox.Reject(err)
			continue
		}
		for {
			if batch == nil {
				if batch, err = s.NewMessageBatch(ctx, nil); err != nil {
					fail(idx[k:], classify(err))
					return
				}
			}
			err = batch.AddMessage(m, nil)
			if err == nil {
				in = append(in, i)
				break
			}
			if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
				errs[i] = err
				break
			}
			if len(in) == 0 { // alone in a batch and still too large
				errs[i] = outbox.Reject(fmt.Errorf("outboxservicebus: send %s to %s: %w (%d bytes of body)", recs[i].ID, dest, err, len(recs[i].Payload)))
				break
			}
			if !send() {
				// The entity is failing: the rest would fail alike.
				fail(idx[k:], errors.New("not sent: an earlier batch to this destination failed"))
				return
			}
		}
	}
	send()
}

// classify rejects the send errors that retrying cannot fix.
func classify(err error) error {
	if errors.Is(err, azservicebus.ErrMessageTooLarge) {
		return outbox.Reject(err)
	}
	return err
}

// sender returns dest's sender, opening it on first use.
func (p *Publisher) sender(dest string) (*azservicebus.Sender, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if s := p.senders[dest]; s != nil {
		return s, nil
	}
	s, err := p.client.NewSender(dest, nil)
	if err != nil {
		return nil, err
	}
	p.senders[dest] = s
	return s, nil
}
