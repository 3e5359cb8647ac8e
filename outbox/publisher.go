package outbox

import "context"

// Publisher sends records to a broker and waits for the broker's own
// confirmation (Kafka's produce ack, JetStream's PubAck, RabbitMQ's
// publisher confirm, Service Bus's accepted disposition). outbox/kafka,
// outbox/nats, outbox/amqp and outbox/servicebus implement it; each puts
// Record.ID where the consumer side's MessageOf reads the stable id. A
// publisher whose broker cannot schedule refuses records with a NotBefore
// time (see Unscheduled) instead of sending them early.
type Publisher interface {
	// Publish sends recs, at once or pipelined, and returns one error per
	// record in recs' order: nil when the broker confirmed it. An error
	// wrapping ErrRejected (see Reject) means the broker refused the
	// message itself, and the relay parks it; any other error is retried
	// with back-off. Publish returns when ctx ends, with ctx's error for
	// the records not confirmed by then.
	//
	// The relay never passes two records of one ordering key in one call:
	// the second waits for the first's confirmation.
	Publish(ctx context.Context, recs []Record) []error
}

// PublisherFunc is a function used as a Publisher.
type PublisherFunc func(ctx context.Context, recs []Record) []error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, recs []Record) []error { return f(ctx, recs) }
