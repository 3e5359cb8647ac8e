package amqpidem

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
)

// DeadLetterOf reads dl, a dead letter a Consumer wrote (taken from the
// dead-letter queue), as an operator's tool needs it: ID is the
// original's id as MessageOf read it (the message-id property, which the
// dead letter keeps), Payload and ContentType the original's, and Headers
// the dead letter's: idem's (Idem-Reason, Idem-Error, Idem-Key and the
// Idem-Stored-* headers), where it came from (x-idem-queue,
// x-idem-exchange, x-idem-routing-key, x-idem-attempt) and the original's
// own. A delivery that is no dead letter of this package (no
// x-idem-routing-key header: one RabbitMQ dead-lettered itself through a
// queue's x-dead-letter-exchange, say) is read with MessageOf and returned
// with ErrNotDeadLetter.
func DeadLetterOf(dl amqp.Delivery) (idem.Message, error) {
	im := MessageOf(dl)
	if _, ok := dl.Headers[HeaderRoutingKey]; !ok {
		return im, ErrNotDeadLetter
	}
	return im, nil
}
