package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
)

// The consumers are written as a user would write them from the package
// docs: a NATS JetStream, RabbitMQ, Kafka, Redis Streams, MQTT, SQS, Pub/Sub, Service Bus or Event Hubs consumer charging orders, with
// the dedup marker in the charge's transaction (PostgreSQL, MariaDB,
// SQLite), or two-phase on Redis with the charge a call to the bank
// carrying the derived key (ledger.go holds the store side).

func connectNATS(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// durable finds the durable consumer, waiting out a broker restart.
func durable(ctx context.Context, js jetstream.JetStream, stream, name string) (jetstream.Consumer, error) {
	var err error
	for range 100 {
		var c jetstream.Consumer
		if c, err = js.Consumer(ctx, stream, name); err == nil {
			return c, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, err
}

func decode(data []byte) (Order, error) {
	var o Order
	if err := json.Unmarshal(data, &o); err != nil {
		return o, idem.Permanent(fmt.Errorf("undecodable order: %w", err))
	}
	if o.Order == "" || o.Account == "" {
		return o, idem.Permanent(fmt.Errorf("order without id or account"))
	}
	return o, nil
}

// charge writes the charge row and the balance update in tx.
func charge(ctx context.Context, tx pgx.Tx, t tables, o Order) error {
	if _, err := tx.Exec(ctx, `insert into `+t.Charges+` (order_id, account, amount, pid) values ($1, $2, $3, $4)`,
		o.Order, o.Account, o.Amount, os.Getpid()); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `insert into `+t.Balances+` (account, balance) values ($1, $2)
		on conflict (account) do update set balance = `+t.Balances+`.balance + excluded.balance`, o.Account, o.Amount)
	return err
}

func runConsumer(ctx context.Context, cfg childConfig) error {
	kill := newKiller(cfg.KillAt, cfg.KillAfter)
	l, err := openLedger(ctx, cfg, kill)
	if err != nil {
		return err
	}
	defer l.close()
	switch cfg.Broker {
	case "amqp":
		return runAMQP(ctx, cfg, l)
	case "kafka":
		return runKafka(ctx, cfg, l)
	case "redisstream":
		return runRedisStream(ctx, cfg, l)
	case "mqtt":
		return runMQTT(ctx, cfg, l)
	case "sqs":
		return runSQS(ctx, cfg, l)
	case "pubsub":
		return runPubSub(ctx, cfg, l)
	case "servicebus":
		return runServiceBus(ctx, cfg, l)
	case "eventhubs":
		return runEventHubs(ctx, cfg, l)
	}
	return runNATS(ctx, cfg, l)
}

// errorLog is the guards' observer: what the consumer handled by itself
// (store outages, NATS max-deliveries advisories, failed dead letters)
// goes to the process's log, as a user's consumer would log it.
type errorLog struct{}

func (errorLog) Observe(context.Context, idem.Event) {}

func (errorLog) ObserveError(_ context.Context, e idem.HandledError) { logf("%v", e.Err) }

func (errorLog) ObserveOutage(_ context.Context, o idem.Outage) {
	logf("store unreachable for scope %q, deliveries held (%d claims since the last report): %v", o.Scope, o.Held, o.Err)
}

// logf writes a timestamped line to the process's log.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s idem chaos consumer %d: %s\n", time.Now().Format("15:04:05.000000"), os.Getpid(), fmt.Sprintf(format, args...))
}

// logAdvisories logs each max-deliveries advisory the process hears on a
// plain subscription of its own, beside the adapter's queue subscription:
// the evidence, when a message JetStream gave up on is lost, of which
// consumers were up to take its advisory.
func logAdvisories(nc *nats.Conn, stream, durable string) {
	nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+stream+"."+durable, func(m *nats.Msg) {
		var adv struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		json.Unmarshal(m.Data, &adv)
		logf("heard the max-deliveries advisory of #%d", adv.StreamSeq)
	})
}

// settleKill is the BeforeSettle kill point: the outcome is committed (or
// completed) and the broker does not know yet.
func settleKill(kill *killer, r broker.Report) {
	if r.Action == idem.ActionAck && r.Result.Outcome == idem.OutcomeProcessed {
		kill.pass(pointSettle)
	}
}

// The engine options of the Kafka, Redis Streams, MQTT, SQS, Pub/Sub,
// Service Bus and Event Hubs consumers, beside the run's concurrency and
// delivery limit: the harness's back-off and shutdown bound.
var (
	engineBackoff  = idem.ExponentialBackoff(100*time.Millisecond, 2*time.Second)
	engineShutdown = 2 * time.Second
)

// engineHooks are those consumers' hooks: the kill point at BeforeSettle.
func engineHooks[M any](l *ledger) broker.Hooks[M] {
	return broker.Hooks[M]{
		BeforeSettle: func(_ context.Context, _ M, r broker.Report) { settleKill(l.kill, r) },
	}
}

// countSettled counts every delivery the consumer settles at BeforeSettle,
// before the kill point: for the adapters whose receiving is inside them.
func countSettled[M any](hooks broker.Hooks[M], count *counter) broker.Hooks[M] {
	settle := hooks.BeforeSettle
	hooks.BeforeSettle = func(ctx context.Context, m M, r broker.Report) {
		count.add(1)
		settle(ctx, m, r)
	}
	return hooks
}

func runNATS(ctx context.Context, cfg childConfig, l *ledger) error {
	nc, js, err := connectNATS(cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := durable(ctx, js, cfg.Source, cfg.Durable)
	if err != nil {
		return err
	}
	if cfg.Naive {
		return runNaive(ctx, cons, cfg, l)
	}
	logf("started")
	logAdvisories(nc, cfg.Source, cfg.Durable)
	h := handlerFor(l, jetstream.Msg.Data, natsidem.Handle, natsidem.HandleTx[pgx.Tx], natsidem.HandleTx[*sql.Tx])
	g, err := natsidem.NewGuard(l.store, cons, l.options())
	if err != nil {
		return err
	}
	c, err := natsidem.NewConsumer(cons, g, h, natsidem.Options{
		JetStream: js, DeadLetterSubject: cfg.DLQ,
		Concurrency: cfg.Concurrency,
		Backoff:     idem.ExponentialBackoff(100*time.Millisecond, 2*time.Second),
		Hooks: broker.Hooks[jetstream.Msg]{
			BeforeSettle: func(_ context.Context, _ jetstream.Msg, r broker.Report) { settleKill(l.kill, r) },
		},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// callBank asks the bank to charge o under key ("" for the naive consumer,
// which has no key to give).
func callBank(ctx context.Context, c *http.Client, url, key string, o Order) error {
	body, _ := json.Marshal(bankCall{Key: key, Order: o})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charge", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bank: %s", resp.Status)
	}
	return nil
}

// runNaive is the same consumer without idem: charge, commit (or call the
// bank), ack. It double-charges every redelivery and producer retry.
func runNaive(ctx context.Context, cons jetstream.Consumer, cfg childConfig, l *ledger) error {
	work := make(chan jetstream.Msg)
	for range max(cfg.Concurrency, 1) {
		go func() {
			for msg := range work {
				switch err := l.naive(ctx, msg.Data()); {
				case errors.Is(err, errPoison):
					msg.Term()
				case err != nil:
					msg.NakWithDelay(200 * time.Millisecond)
				default:
					l.kill.pass(pointSettle)
					msg.Ack()
				}
			}
		}()
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { work <- msg }, jetstream.PullMaxMessages(2*max(cfg.Concurrency, 1)))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	return ctx.Err()
}
