package pubsubidem

import (
	"context"
	"fmt"
	"maps"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
)

// HeaderID is the attribute that carries the publisher's own id of a
// message: the default key (MessageOf puts it in idem.Message.ID). Publish
// sets it.
const HeaderID = "Idem-Id"

// Message is one delivery of a Pub/Sub message to a Consumer: the client
// library's message and when this process received it (the start of the
// client's ack-deadline extension, bounded by ReceiveSettings.MaxExtension).
type Message struct {
	*pubsub.Message
	// Received is when the message reached the consumer. A Message built
	// by hand for Consumer.Process may leave it zero: its extension's end
	// is then not watched.
	Received time.Time
}

// MessageOf builds the idem.Message the guard sees: ID from the Idem-Id
// attribute (HeaderID, matched case-insensitively), Headers the
// attributes (the message's own map, read only), Payload the data,
// ContentType the Content-Type attribute (any case: the CloudEvents
// Pub/Sub binding's content-type). The server's message id, the publish
// time, the delivery attempt and the ordering key are deliberately left
// out: a publish the client retried (its first reply lost) is another
// message with another server id, so a key on the server id would run it
// twice. Any other key function of idem works over the attributes:
// idem.HeaderKey for an attribute of your own, idem.CloudEventsKey for the
// binding's ce-id and ce-source, or the payload (idem.JSONFieldsKey).
func MessageOf(m *Message) idem.Message {
	if m == nil || m.Message == nil {
		return idem.Message{}
	}
	im := idem.Message{Payload: m.Data, Headers: m.Attributes}
	im.ID = im.Header(HeaderID)
	im.ContentType = im.Header("Content-Type")
	return im
}

// Publish publishes m on p with id as its Idem-Id attribute (m's
// attributes are copied, not changed): the key of every copy of it,
// however often the client retries the publish or the producer sends it
// again. Call Get on the result to know it is stored.
//
// Publish sets no broker dedup id, because Pub/Sub has none: it stores
// every publish it accepts (exactly-once delivery concerns acks, not
// publishes), so no duplicate window can swallow an id reused with other
// content; each stored copy reaches the consumer, whose record makes a
// repeat a duplicate and other content a conflict.
func Publish(ctx context.Context, p *pubsub.Publisher, id string, m *pubsub.Message) *pubsub.PublishResult {
	out := *m
	out.Attributes = maps.Clone(m.Attributes)
	if out.Attributes == nil {
		out.Attributes = map[string]string{}
	}
	out.Attributes[HeaderID] = id
	return p.Publish(ctx, &out)
}

// NewGuard is idem.New with opts.Scope defaulting to the subscription's
// full name (projects/<project>/subscriptions/<name>): one consumer
// identity, shared by every process that receives from it.
func NewGuard(store idem.Store, sub *pubsub.Subscriber, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if sub == nil {
			return nil, fmt.Errorf("%w: pubsubidem: nil subscriber for the scope", idem.ErrInvalidOptions)
		}
		opts.Scope = sub.String()
	}
	return idem.New(store, opts)
}
