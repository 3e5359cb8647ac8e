package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// amqpPrefetch is both sides' prefetch (basic.qos): idem's default,
// 2 × Concurrency.
const amqpPrefetch = 2 * workers

type amqpEnv struct {
	d          *db
	conn       *amqp.Connection
	queue, dlq string
}

// loadAMQP declares a durable queue of its own on the machine's RabbitMQ
// and publishes n persistent messages to it; each side consumes it with
// manual acks.
func loadAMQP(t testing.TB, d *db, n int) map[string]side {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQ.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tag := fmt.Sprintf("%d.%d", time.Now().UnixNano(), rand.Uint32())
	e := &amqpEnv{d: d, conn: conn, queue: "e2e." + tag, dlq: "e2e." + tag + ".dlq"}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range []string{e.queue, e.dlq} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ch, err := conn.Channel()
			if err != nil {
				t.Errorf("delete queue %s: %v", q, err)
				return
			}
			defer ch.Close()
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("delete queue %s: %v", q, err)
			}
		})
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dcs := make([]*amqp.DeferredConfirmation, n)
	for i := range n {
		dcs[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", e.queue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("order-%d", i), DeliveryMode: amqp.Persistent,
			ContentType: "application/json", Body: body(i)})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	tx := func(ctx context.Context, r *run, store *postgres.Store, fn func(context.Context, pgx.Tx, amqp.Delivery) ([]byte, error)) error {
		return e.idem(ctx, r, store, amqpidem.HandleTx(fn))
	}
	twoPhase := func(ctx context.Context, r *run, fn func(context.Context, amqp.Delivery) ([]byte, error)) error {
		return e.idem(ctx, r, d.store, amqpidem.Handle(fn))
	}
	return sidesOf(d, func(m amqp.Delivery) string { return m.MessageId }, func(m amqp.Delivery) []byte { return m.Body }, e.hand, tx, "idem-2p", twoPhase)
}

// hand is the consumer a user writes with amqp091-go alone: a channel with
// amqpPrefetch unacked messages, and workers goroutines ranging over its
// deliveries, each running work and acking.
func (e *amqpEnv) hand(ctx context.Context, r *run, work func(context.Context, amqp.Delivery) error) error {
	ch, err := e.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		return err
	}
	const tag = "hand"
	deliveries, err := ch.Consume(e.queue, tag, false, false, false, false, nil)
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		once sync.Once
		werr error
	)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for range workers {
		wg.Go(func() {
			for m := range deliveries {
				if err := work(ctx, m); err == nil {
					err = m.Ack(false)
				} else if ctx.Err() == nil {
					once.Do(func() { werr = err; stop() })
				}
				if err != nil {
					_ = m.Nack(false, true)
					continue
				}
				r.settled()
			}
		})
	}
	<-ctx.Done()
	cerr := ch.Cancel(tag, false) // closes deliveries once the ones in flight are handed out
	wg.Wait()
	if werr != nil {
		return werr
	}
	return cerr
}

// idem runs idem's consumer with h over store, with
// the same workers and prefetch.
func (e *amqpEnv) idem(ctx context.Context, r *run, store *postgres.Store, h amqpidem.Handler) error {
	ch, err := e.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	g, err := amqpidem.NewGuard(store, e.queue, idem.Options{})
	if err != nil {
		return err
	}
	return amqpidem.Consume(ctx, ch, g, h, amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq, Prefetch: amqpPrefetch,
		Concurrency: workers, Hooks: hooks[amqp.Delivery](r)})
}
