package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	sbidem "github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

// Azure Service Bus: the broker is servicebustest, an in-process Service
// Bus the harness hosts on a loopback port, which the consumer processes
// reach by its connection string with the real, unmodified azservicebus
// client (AMQP 1.0), as they would reach Azure. It keeps its entities in
// memory, so it is never restarted. Each pass has a queue without
// duplicate detection (every producer retry reaches the consumers) whose
// MaxDeliveryCount is the run's delivery limit, with the consumers'
// MaxDeliveries set to match, as the servicebus package doc says; dead
// letters go to the queue's $DeadLetterQueue.

// sbLock is the queue's lock duration: how long a killed consumer's
// messages stay locked before another receives them. The consumers renew
// the lock while they handle a message.
const sbLock = 2 * time.Second

// StartServiceBus starts the harness's in-process Service Bus; its URL is
// the namespace's connection string, what the consumer processes connect
// with.
func StartServiceBus(context.Context) (Server, error) {
	srv, err := servicebustest.NewServer()
	if err != nil {
		return nil, fmt.Errorf("chaos: servicebustest: %w", err)
	}
	return &memServer[*servicebustest.Server]{srv: srv, name: "servicebustest", url: srv.ConnectionString(), close: srv.Close}, nil
}

type sbBus struct {
	srv           *servicebustest.Server
	client        *azservicebus.Client
	queue, counts string
	limit         int          // the queue's MaxDeliveryCount and the consumers' MaxDeliveries
	sent          atomic.Int64 // messages Service Bus accepted
}

func openServiceBus(_ context.Context, e *env, limit int, naive bool) (bus, error) {
	srv, ok := e.broker.(*memServer[*servicebustest.Server])
	if !ok {
		return nil, errors.New("chaos: Service Bus runs on the harness's own servicebustest only")
	}
	b := &sbBus{srv: srv.srv, queue: "chaos-orders", limit: limit}
	if naive {
		b.queue = "chaos-naive-orders"
	}
	if err := b.srv.CreateQueue(b.queue, servicebustest.QueueOptions{LockDuration: sbLock, MaxDeliveryCount: limit}); err != nil {
		return nil, fmt.Errorf("chaos: servicebustest: create queue %s: %w", b.queue, err)
	}
	var err error
	if b.client, err = azservicebus.NewClientFromConnectionString(srv.URL(), nil); err != nil {
		return nil, err
	}
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *sbBus) names(cc *childConfig) {
	cc.Source, cc.Counts, cc.MaxDeliveries = b.queue, b.counts, b.limit
}

func (b *sbBus) close() { b.client.Close(context.Background()) }

// progress: what Service Bus accepted less what the queue still holds,
// available, locked, deferred or scheduled.
func (b *sbBus) progress(context.Context) (int64, bool, bool) {
	st, err := b.srv.Stats(b.queue)
	if err != nil {
		return 0, false, false
	}
	held := int64(st.Active + st.Locked + st.Deferred + st.Scheduled)
	return b.sent.Load() - held, held == 0, true
}

func (b *sbBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce sends each message with sbidem.Send (the order id in Idem-Id; a
// message without a key plainly, with no MessageID), and sends again each
// one whose send failed: the queue has no duplicate detection, so an order
// whose acknowledgement was what was lost is in the queue twice.
func (b *sbBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	sender, err := b.client.NewSender(b.queue, nil)
	if err != nil {
		return err
	}
	defer sender.Close(context.Background())
	ct := "application/json"
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		var again []planned
		for _, m := range todo {
			msg := &azservicebus.Message{Body: m.Data, ContentType: &ct}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if m.ID == "" {
				err = sender.SendMessage(sctx, msg, nil)
			} else {
				err = sbidem.Send(sctx, sender, m.ID, msg)
			}
			cancel()
			if err != nil {
				again = append(again, m)
				continue
			}
			b.sent.Add(1)
		}
		return again
	})
}

// deadLetters receives the queue's $DeadLetterQueue whole (the pass is
// over: nothing else reads it).
func (b *sbBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	st, err := b.srv.Stats(b.queue)
	if err != nil {
		return nil, err
	}
	r, err := b.client.NewReceiverForQueue(b.queue, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		return nil, err
	}
	defer r.Close(context.Background())
	var dls []deadLetter
	for len(dls) < st.DeadLettered {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msgs, err := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("chaos: read the dead letters: %d of %d: %w", len(dls), st.DeadLettered, err)
		}
		for _, m := range msgs {
			im, _ := sbidem.DeadLetterOf(m) // one Service Bus dead-lettered itself has no reason: the verdict says so
			dls = append(dls, newDeadLetter(im.Headers[sbidem.HeaderID], im.Headers[idem.HeaderReason], m.Body))
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				return nil, err
			}
		}
	}
	return dls, nil
}

// runServiceBus is a Service Bus consumer process, run by the servicebus
// package's consumer on a PeekLock receiver of the queue: it renews the
// lock of what it handles, completes after the commit and dead-letters
// to the queue's $DeadLetterQueue.
func runServiceBus(ctx context.Context, cfg childConfig, l *ledger) error {
	client, err := azservicebus.NewClientFromConnectionString(cfg.BrokerURL, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	recv, err := client.NewReceiverForQueue(cfg.Source, nil)
	if err != nil {
		return err
	}
	count := newCounter(cfg.Counts)
	if cfg.Naive {
		return runNaiveServiceBus(ctx, recv, count, cfg, l)
	}
	logf("started")
	entity := sbidem.EntityPath(cfg.Source)
	g, err := sbidem.NewGuard(l.store, entity, l.options())
	if err != nil {
		return err
	}
	body := func(m *azservicebus.ReceivedMessage) []byte { return m.Body }
	h := handlerFor(l, body, sbidem.Handle, sbidem.HandleTx[pgx.Tx], sbidem.HandleTx[*sql.Tx])
	// The receiver is the adapter's: every delivery the consumer settles
	// is counted.
	c, err := sbidem.NewConsumer(recv, g, h, sbidem.Options{EntityPath: entity,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: countSettled(engineHooks[*azservicebus.ReceivedMessage](l), count),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveServiceBus: receive, charge, commit, complete. A failed charge
// is abandoned after a pause (Service Bus delivers it again at once); an
// undecodable one is completed (dropped).
func runNaiveServiceBus(ctx context.Context, recv *azservicebus.Receiver, count *counter, cfg childConfig, l *ledger) error {
	conc := max(cfg.Concurrency, 1)
	work := make(chan *azservicebus.ReceivedMessage)
	defer close(work)
	for range conc {
		go func() {
			for m := range work {
				switch err := l.naive(ctx, m.Body); {
				case err == nil:
					l.kill.pass(pointSettle)
					recv.CompleteMessage(ctx, m, nil)
				case errors.Is(err, errPoison):
					recv.CompleteMessage(ctx, m, nil)
				default:
					time.Sleep(200 * time.Millisecond)
					recv.AbandonMessage(ctx, m, nil)
				}
			}
		}()
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msgs, err := recv.ReceiveMessages(rctx, conc, nil)
		cancel()
		if err != nil && len(msgs) == 0 {
			if !errors.Is(err, context.DeadlineExceeded) {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		count.add(uint64(len(msgs)))
		for _, m := range msgs {
			work <- m
		}
	}
	return ctx.Err()
}
