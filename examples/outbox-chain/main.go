// Command outbox-chain is two services chained through NATS JetStream,
// each effectively once.
//
// billing consumes orders.placed. In one PostgreSQL transaction it writes
// the idem inbox marker of the order message, the charge, and an outgoing
// billing.charged message in its transactional outbox. Its relay publishes
// the outbox to JetStream, with the message's stable id.
//
// shipping consumes billing.charged with an idem inbox in its own database
// (SQLite) and writes one shipment per charge.
//
// Every failure between the steps only repeats a step whose repeat the
// next step removes: an order redelivered after billing committed is a
// duplicate at billing's inbox (no second charge, no second message); a
// relay that dies before publishing publishes after its restart; one that
// dies between JetStream's PubAck and its mark publishes again, with the
// same id, and shipping's inbox skips the repeat; a charge redelivered
// after shipping committed is a duplicate at shipping's inbox.
//
//	NATS_URL=nats://localhost:4222 IDEM_POSTGRES_URL=postgres://localhost/billing SHIPPING_DB=shipping.db go run .
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/outbox"
	outboxnats "github.com/idemgo/idem/outbox/nats"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/sqlite"
)

// order is what the shop publishes on orders.placed.
type order struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
}

// charged is what billing publishes, through its outbox, on billing.charged.
type charged struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

type config struct {
	NATSURL     string
	PostgresURL string // billing's database
	ShippingDB  string // shipping's SQLite file
	Prefix      string // of the streams and subjects (tests use their own)
	Logger      *slog.Logger

	AckWait        time.Duration // of both consumers; default 30s
	RelayLease     time.Duration // default outbox.DefaultLease
	RelayBatch     int           // default outbox.DefaultBatchSize
	PollInterval   time.Duration // the relay's; default outbox.DefaultPollInterval
	ChargedDedupes time.Duration // billing.charged's duplicate window; default 2m

	// Test hooks: what a crash looks like is the test's business.
	billingHooks  broker.Hooks[jetstream.Msg]
	shippingHooks broker.Hooks[jetstream.Msg]
	relayStore    func(outbox.Store) outbox.Store
	publisher     func(outbox.Publisher) outbox.Publisher
	dial          func(name string) (*nats.Conn, error)
}

// dialNATS opens a connection named name.
func (c config) dialNATS(name string) (*nats.Conn, error) {
	if c.dial != nil {
		return c.dial(name)
	}
	return nats.Connect(c.NATSURL, nats.Name(name))
}

func (c config) subject(s string) string { return c.Prefix + s }
func (c config) stream(s string) string  { return c.Prefix + s }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		NATSURL:     getenv("NATS_URL", nats.DefaultURL),
		PostgresURL: getenv("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		ShippingDB:  getenv("SHIPPING_DB", "shipping.db"),
		Logger:      slog.Default(),
	}
	err := together(ctx,
		func(ctx context.Context) error { return runBilling(ctx, cfg) },
		func(ctx context.Context) error { return runShipping(ctx, cfg) })
	if err != nil {
		log.Fatal(err)
	}
}

// setupStreams declares the streams (and their dead-letter streams).
func setupStreams(ctx context.Context, js jetstream.JetStream, cfg config) error {
	window := cfg.ChargedDedupes
	if window == 0 {
		window = 2 * time.Minute
	}
	for _, s := range []jetstream.StreamConfig{
		{Name: cfg.stream("ORDERS"), Subjects: []string{cfg.subject("orders.placed")}},
		{Name: cfg.stream("ORDERS_DLQ"), Subjects: []string{cfg.subject("orders.dlq")}},
		{Name: cfg.stream("CHARGED"), Subjects: []string{cfg.subject("billing.charged")}, Duplicates: window},
		{Name: cfg.stream("CHARGED_DLQ"), Subjects: []string{cfg.subject("billing.dlq")}},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, s); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	return nil
}

func consumer(ctx context.Context, js jetstream.JetStream, cfg config, stream, durable string) (jetstream.Consumer, error) {
	wait := cfg.AckWait
	if wait == 0 {
		wait = 30 * time.Second
	}
	return js.CreateOrUpdateConsumer(ctx, cfg.stream(stream), jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: wait, MaxDeliver: -1,
	})
}

// connect opens a NATS connection and JetStream on it, with the streams.
func connect(ctx context.Context, cfg config, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := cfg.dialNATS(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		err = setupStreams(ctx, js, cfg)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// runBilling runs billing's consumer and its outbox relay until ctx ends.
func runBilling(ctx context.Context, cfg config) error {
	nc, js, err := connect(ctx, cfg, "billing")
	if err != nil {
		return err
	}
	defer nc.Close()
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS charges (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id text NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		return err
	}
	inbox, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		return err
	}
	ob, err := outboxpostgres.New(pool, outboxpostgres.Options{})
	if err != nil {
		return err
	}
	if err := inbox.Migrate(ctx); err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}

	// The relay, on its own connection: the outbox to billing.charged.
	relayNC, err := cfg.dialNATS("billing-relay")
	if err != nil {
		return err
	}
	defer relayNC.Close()
	relayJS, err := jetstream.New(relayNC)
	if err != nil {
		return err
	}
	var pub outbox.Publisher
	if pub, err = outboxnats.New(relayJS, outboxnats.Options{}); err != nil {
		return err
	}
	var store outbox.Store = ob
	if cfg.relayStore != nil {
		store = cfg.relayStore(store)
	}
	if cfg.publisher != nil {
		pub = cfg.publisher(pub)
	}
	relay, err := outbox.NewRelay(store, pub, outbox.RelayOptions{
		Lease: cfg.RelayLease, PollInterval: cfg.PollInterval, BatchSize: cfg.RelayBatch,
		Observer: idem.NewSlogObserver(cfg.Logger),
	})
	if err != nil {
		return err
	}

	cons, err := consumer(ctx, js, cfg, "ORDERS", "billing")
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(inbox, cons, idem.Options{Observer: idem.NewSlogObserver(cfg.Logger)})
	if err != nil {
		return err
	}
	// One transaction: the inbox marker (DoTx), the charge, the outgoing
	// message. Its id is derived from the order message's key, so a run
	// that rolled back and runs again enqueues the same id.
	handle := natsidem.HandleTx(func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) ([]byte, error) {
		var o order
		if err := json.Unmarshal(msg.Data(), &o); err != nil || o.ID == "" {
			return nil, idem.Permanent(fmt.Errorf("bad order %q", msg.Data()))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.AmountCents); err != nil {
			return nil, err
		}
		body, _ := json.Marshal(charged{OrderID: o.ID, AmountCents: o.AmountCents})
		return nil, ob.Enqueue(ctx, tx, outbox.Message{
			Destination: cfg.subject("billing.charged"),
			OrderingKey: o.ID,
			Headers:     map[string]string{"Content-Type": "application/json"},
			Payload:     body,
		})
	})
	return together(ctx, relay.Run, func(ctx context.Context) error {
		return natsidem.Consume(ctx, cons, g, handle, natsidem.Options{Concurrency: 4, Hooks: cfg.billingHooks, JetStream: js, DeadLetterSubject: cfg.subject("orders.dlq")})
	})
}

// runShipping runs shipping's consumer until ctx ends.
func runShipping(ctx context.Context, cfg config) error {
	nc, js, err := connect(ctx, cfg, "shipping")
	if err != nil {
		return err
	}
	defer nc.Close()
	inbox, err := sqlite.Open(cfg.ShippingDB, sqlite.Options{})
	if err != nil {
		return err
	}
	defer inbox.Close()
	if err := inbox.Migrate(ctx); err != nil {
		return err
	}
	if _, err := inbox.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shipments (
		id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)`); err != nil {
		return err
	}
	cons, err := consumer(ctx, js, cfg, "CHARGED", "shipping")
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(inbox, cons, idem.Options{Observer: idem.NewSlogObserver(cfg.Logger)})
	if err != nil {
		return err
	}
	handle := natsidem.HandleTx(func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) ([]byte, error) {
		var c charged
		if err := json.Unmarshal(msg.Data(), &c); err != nil || c.OrderID == "" {
			return nil, idem.Permanent(fmt.Errorf("bad charge %q", msg.Data()))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id, amount_cents) VALUES (?, ?)`, c.OrderID, c.AmountCents)
		return nil, err
	})
	return natsidem.Consume(ctx, cons, g, handle, natsidem.Options{Concurrency: 4, Hooks: cfg.shippingHooks, JetStream: js, DeadLetterSubject: cfg.subject("billing.dlq")})
}

// placeOrder is the shop: it publishes an order with its id as the stable
// message id (a retry reuses it).
func placeOrder(ctx context.Context, js jetstream.JetStream, cfg config, o order) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = natsidem.Publish(ctx, js, cfg.subject("orders.placed"), o.ID, body)
	return err
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// together runs the functions until each returns; the first to return
// ends the others' context. It returns the first error.
func together(ctx context.Context, fns ...func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() {
			err := fn(ctx)
			cancel()
			errs <- err
		}()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
