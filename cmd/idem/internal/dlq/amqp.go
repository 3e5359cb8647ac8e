package dlq

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	amqpidem "github.com/idemgo/idem/broker/amqp"
)

// amqpQueue reads a dead-letter queue with basic.get and no ack: the
// messages it does not replay go back when its channel closes, to the
// place they had (as the management UI's "get messages" does). On a
// quorum queue each such read counts toward the queue's own
// delivery-limit, if it has one.
type amqpQueue struct {
	conn       *amqp.Connection
	url        string
	dlq, queue string
}

// OpenAMQP opens amqp://USER:PASS@HOST:PORT/VHOST?dlq=QUEUE[&queue=Q]
// (or amqps://): the dead-letter queue, and the consumed queue.
func OpenAMQP(ctx context.Context, u *url.URL, raw string) (Queue, error) {
	q := &amqpQueue{url: u.Redacted(), dlq: u.Query().Get("dlq"), queue: u.Query().Get("queue")}
	if q.dlq == "" && q.queue == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=QUEUE (the dead-letter queue)", ErrBadURL, q.url)
	}
	server := *u
	server.RawQuery = ""
	conn, err := amqp.DialConfig(server.String(), amqp.Config{Properties: amqp.Table{"connection_name": "idem dlq"}})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", q.url, err)
	}
	q.conn = conn
	return q, nil
}

func (q *amqpQueue) Name() string { return "RabbitMQ queue " + q.dlq + " at " + q.url }

func (q *amqpQueue) Close() error { return q.conn.Close() }

// each gets the messages the dead-letter queue held at the call's start,
// oldest first, until f returns false; it then closes its channel, which
// puts back every message not acked.
func (q *amqpQueue) each(f func(amqp.Delivery, DeadLetter) bool) error {
	if q.dlq == "" {
		return fmt.Errorf("%w: %s has no ?dlq=QUEUE (the dead-letter queue)", ErrBadURL, q.url)
	}
	ch, err := q.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q.dlq, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("dead-letter queue %s at %s: %w", q.dlq, q.url, err)
	}
	for i := range st.Messages {
		d, ok, err := ch.Get(q.dlq, false)
		if err != nil {
			return fmt.Errorf("read %s: %w", q.dlq, err)
		}
		if !ok || !f(d, amqpDeadLetter(d, i+1)) {
			return nil
		}
	}
	return nil
}

func amqpDeadLetter(d amqp.Delivery, pos int) DeadLetter {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		h[k] = amqpidem.HeaderString(v)
	}
	id := "#" + strconv.Itoa(pos) // not idem's: its place in the queue
	if ct, dt := h[amqpidem.HeaderConsumerTag], h[amqpidem.HeaderDeliveryTag]; ct != "" && dt != "" {
		id = ct + "/" + dt
	}
	dl := deadLetterOf(id, h, d.Body)
	if dl.Reason == "" {
		dl.Reason = h[amqpidem.HeaderReason]
	}
	dl.Source, dl.At = h[amqpidem.HeaderQueue], d.Timestamp
	return dl
}

func (q *amqpQueue) List(_ context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.each(func(_ amqp.Delivery, dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Replay publishes each selected dead letter to its exchange and routing
// key with amqpidem.Replay, on a channel in confirm mode, and acks it.
func (q *amqpQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	want := idSet(ids)
	pub, err := q.conn.Channel()
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := pub.Confirm(false); err != nil {
		return err
	}
	return q.each(func(d amqp.Delivery, dl DeadLetter) bool {
		if !want[dl.ID] {
			return true
		}
		delete(want, dl.ID)
		err := amqpidem.Replay(ctx, pub, d)
		if err == nil {
			if err = d.Ack(false); err != nil {
				err = fmt.Errorf("replayed, but not acked in %s (it would be replayed again): %w", q.dlq, err)
			}
		}
		done(dl, err)
		return len(want) > 0
	})
}

// Horizon: AMQP 0.9.1 does not let a client read a queue's arguments or
// policies (x-message-ttl, x-delivery-limit): the management API does.
func (q *amqpQueue) Horizon(context.Context) ([]Span, []error, error) {
	ch, err := q.conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	defer ch.Close()
	var notes []error
	for _, name := range []string{q.queue, q.dlq} {
		if name == "" {
			continue
		}
		if _, err := ch.QueueDeclarePassive(name, false, false, false, false, nil); err != nil {
			return nil, nil, fmt.Errorf("queue %s at %s: %w", name, q.url, err)
		}
		notes = append(notes, fmt.Errorf("%w: queue %s: its message TTL and delivery-limit (arguments or policy) are not readable over AMQP; "+
			"read them with rabbitmqctl list_queues name arguments policy, or the management API, and pass the longest as --redelivery-horizon",
			ErrNotReadable, name))
	}
	return nil, notes, nil
}

var _ Horizoner = (*amqpQueue)(nil)
