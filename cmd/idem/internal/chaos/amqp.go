package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
)

// RabbitMQ: the harness never starts, stops or restarts a RabbitMQ node.
// It uses its own uniquely named queues on the machine's node (or the
// user's, with --broker amqp://...) and deletes them afterwards: a quorum
// work queue with a delivery limit, and a dead-letter queue the consumers
// publish their dead letters to.

// AMQPURL is the RabbitMQ the harness uses when none is given: the
// IDEM_AMQP_URL environment variable, else the local default.
func AMQPURL() string {
	if u := os.Getenv("IDEM_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// dialAMQP dials url, retrying for a while (the user's node may be
// restarting).
func dialAMQP(ctx context.Context, url string) (*amqp.Connection, error) {
	var err error
	for range 150 {
		var c *amqp.Connection
		if c, err = amqp.Dial(url); err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, err
}

type amqpBus struct {
	url, queue, dlq, counts string
	limit                   int // the work queue's x-delivery-limit
	mu                      sync.Mutex
	conn                    *amqp.Connection
	published               atomic.Int64 // messages the broker confirmed
}

// openAMQP declares the pass's queues: the quorum work queue with the
// run's x-delivery-limit and, as the amqp package doc asks, a
// dead-letter exchange to the dead-letter queue, so a message whose every
// delivery a crash spent is dead-lettered by RabbitMQ (delivery_limit)
// rather than dropped.
func openAMQP(ctx context.Context, e *env, limit int, naive bool) (bus, error) {
	tag := fmt.Sprintf("idem-chaos-%d-%d", os.Getpid(), time.Now().UnixNano())
	if naive {
		tag += "-naive"
	}
	b := &amqpBus{url: e.broker.URL(), queue: tag + ".orders", dlq: tag + ".dlq", limit: limit}
	var err error
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		return nil, err
	}
	err = b.with(ctx, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(b.queue, true, false, false, false,
			amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(limit),
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b.dlq}); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(b.dlq, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err
	})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("chaos: RabbitMQ at %s: declare the queues: %w", b.url, err)
	}
	return b, nil
}

// with runs fn on a fresh channel of the bus's connection, reconnecting
// when the connection is gone.
func (b *amqpBus) with(ctx context.Context, fn func(ch *amqp.Channel) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil || b.conn.IsClosed() {
		c, err := dialAMQP(ctx, b.url)
		if err != nil {
			return err
		}
		b.conn = c
	}
	ch, err := b.conn.Channel()
	if err != nil {
		b.conn.Close()
		b.conn = nil
		return err
	}
	defer ch.Close()
	return fn(ch)
}

func (b *amqpBus) names(cc *childConfig) {
	cc.Source, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.queue, b.dlq, b.counts, b.limit
}

func (b *amqpBus) close() {
	b.with(context.Background(), func(ch *amqp.Channel) error {
		ch.QueueDelete(b.queue, false, false, false)
		_, err := ch.QueueDelete(b.dlq, false, false, false)
		return err
	})
	b.mu.Lock()
	if b.conn != nil {
		b.conn.Close()
	}
	b.mu.Unlock()
}

// queueState is the work queue's ready messages and consumers.
func (b *amqpBus) queueState(ctx context.Context) (ready, consumers int, err error) {
	err = b.with(ctx, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(b.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		ready, consumers = q.Messages, q.Consumers
		return err
	})
	return ready, consumers, err
}

// progress: RabbitMQ tells the ready messages only, so the settled count
// takes the deliveries in flight as settled, and idle needs the drain.
func (b *amqpBus) progress(ctx context.Context) (int64, bool, bool) {
	ready, _, err := b.queueState(ctx)
	if err != nil {
		return 0, false, false
	}
	return b.published.Load() - int64(ready), ready == 0, true
}

// idleWithoutConsumers: with every consumer gone, RabbitMQ has put back
// what they held: the queue is done when nothing is ready.
func (b *amqpBus) idleWithoutConsumers(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, consumers, err := b.queueState(ctx)
		if err == nil && consumers == 0 {
			time.Sleep(300 * time.Millisecond) // the requeue of the last consumer's deliveries
			if ready, _, err = b.queueState(ctx); err == nil {
				return ready == 0, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("chaos: RabbitMQ queue %s: consumers still attached 30s after their processes ended (%v)", b.queue, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *amqpBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce publishes in batches and waits for their confirms; a batch whose
// confirms did not all come is published again whole.
func (b *amqpBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	const batch = 50
	var conn *amqp.Connection
	var ch *amqp.Channel
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; i < len(plan.Msgs); i += batch {
		if err := waitWindow(ctx, i, settled); err != nil {
			return err
		}
		msgs := plan.Msgs[i:min(i+batch, len(plan.Msgs))]
		for {
			if ch == nil {
				var err error
				if conn, ch, err = confirmChannel(ctx, b.url, conn); err != nil {
					return err
				}
			}
			n, err := publishConfirmed(ctx, ch, b.queue, msgs)
			b.published.Add(int64(n))
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ch.Close()
			ch = nil
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// confirmChannel opens a channel in confirm mode, on old's connection if
// it still stands.
func confirmChannel(ctx context.Context, url string, old *amqp.Connection) (*amqp.Connection, *amqp.Channel, error) {
	conn := old
	if conn == nil || conn.IsClosed() {
		if conn != nil {
			conn.Close()
		}
		var err error
		if conn, err = dialAMQP(ctx, url); err != nil {
			return nil, nil, err
		}
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

// publishConfirmed publishes msgs and waits for every confirm; n is how
// many the broker confirmed.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, queue string, msgs []planned) (n int, err error) {
	dcs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		p := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.ID, Body: m.Data, Timestamp: time.Now()}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, p)
		if err != nil {
			return 0, err
		}
		dcs = append(dcs, dc)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, dc := range dcs {
		ok, err := dc.WaitContext(wctx)
		if err != nil {
			return n, err
		}
		if !ok {
			return n, errors.New("publish nacked")
		}
		n++
	}
	return n, nil
}

func (b *amqpBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	var dls []deadLetter
	err := b.with(ctx, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(b.dlq, true)
			if err != nil || !ok {
				return err
			}
			reason, _ := d.Headers[idem.HeaderReason].(string)
			if reason == "" {
				// dead-lettered by RabbitMQ itself (delivery_limit)
				reason, _ = d.Headers["x-first-death-reason"].(string)
			}
			dls = append(dls, newDeadLetter(d.MessageId, reason, d.Body))
		}
	})
	return dls, err
}

// runAMQP is a RabbitMQ consumer process: the amqpidem consumer on a
// channel of its own, dead letters published on another.
func runAMQP(ctx context.Context, cfg childConfig, l *ledger) error {
	conn, err := dialAMQP(ctx, cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	count := newCounter(cfg.Counts)
	if cfg.Naive {
		return runNaiveAMQP(ctx, ch, cfg, l, count)
	}
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	// The highest delivery tag of the channel is its count of deliveries,
	// taken as the handler starts and as each delivery settles.
	body := func(d amqp.Delivery) []byte { count.atLeast(d.DeliveryTag); return d.Body }
	h := handlerFor(l, body,
		amqpidem.Handle, amqpidem.HandleTx[pgx.Tx], amqpidem.HandleTx[*sql.Tx])
	g, err := amqpidem.NewGuard(l.store, cfg.Source, l.options())
	if err != nil {
		return err
	}
	c, err := amqpidem.NewConsumer(ch, g, h, amqpidem.Options{
		Queue: cfg.Source, DeadLetterRoutingKey: cfg.DLQ, Publisher: pub,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries, // the queue's delivery-limit
		Backoff: idem.ExponentialBackoff(100*time.Millisecond, 2*time.Second),
		Hooks: broker.Hooks[amqp.Delivery]{
			BeforeSettle: func(_ context.Context, d amqp.Delivery, r broker.Report) {
				count.atLeast(d.DeliveryTag)
				settleKill(l.kill, r)
			},
		},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveAMQP: charge, commit, ack; an undecodable payload is rejected
// (dropped: the queue has no dead-letter exchange).
func runNaiveAMQP(ctx context.Context, ch *amqp.Channel, cfg childConfig, l *ledger, count *counter) error {
	if err := ch.Qos(2*max(cfg.Concurrency, 1), 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(cfg.Source, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range max(cfg.Concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ds {
				count.atLeast(d.DeliveryTag)
				switch err := l.naive(ctx, d.Body); {
				case errors.Is(err, errPoison):
					d.Reject(false)
				case err != nil:
					time.Sleep(200 * time.Millisecond)
					d.Nack(false, true)
				default:
					l.kill.pass(pointSettle)
					d.Ack(false)
				}
			}
		}()
	}
	wg.Wait()
	return errors.New("deliveries closed")
}

// checkAMQP dials the RabbitMQ at url once: a missing node is ErrNoServer.
func checkAMQP(ctx context.Context, url string) error {
	c, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("%w: RabbitMQ at %s: %v (start one, or set IDEM_AMQP_URL or pass --broker amqp://...)", ErrNoServer, url, err)
	}
	return c.Close()
}
