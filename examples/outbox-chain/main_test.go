package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"

	_ "modernc.org/sqlite"
)

// process is one run of a service: crashing it closes its NATS
// connections (what it had not acked, it never will) and ends its context.
type process struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	conns  []*nats.Conn
	dead   atomic.Bool
}

func (p *process) crash() {
	if p.dead.Swap(true) {
		return
	}
	p.mu.Lock()
	for _, nc := range p.conns {
		nc.Close()
	}
	p.mu.Unlock()
	p.cancel()
}

// service runs a service again after each crash, until ctx ends.
type service struct {
	name    string
	run     func(ctx context.Context, cfg config) error
	current atomic.Pointer[process]
	starts  atomic.Int32
}

func (s *service) loop(t *testing.T, ctx context.Context, cfg config) {
	for ctx.Err() == nil {
		pctx, cancel := context.WithCancel(ctx)
		p := &process{cancel: cancel}
		s.current.Store(p)
		s.starts.Add(1)
		c := cfg
		c.dial = func(name string) (*nats.Conn, error) {
			nc, err := nats.Connect(cfg.NATSURL, nats.Name(s.name+"-"+name))
			if err == nil {
				p.mu.Lock()
				p.conns = append(p.conns, nc)
				p.mu.Unlock()
			}
			return nc, err
		}
		err := s.run(pctx, c)
		cancel()
		if err != nil && !p.dead.Load() && ctx.Err() == nil {
			t.Errorf("%s: %v", s.name, err)
			return
		}
	}
}

func (s *service) crash() { s.current.Load().crash() }

// schedule says when to crash: on the calls of now numbered in at (1 for
// the first).
type schedule struct {
	at    []int32
	n     atomic.Int32
	fired atomic.Int32
}

func crashAt(at ...int32) *schedule { return &schedule{at: at} }

func (s *schedule) now() bool {
	i := s.n.Add(1)
	for _, a := range s.at {
		if i == a {
			s.fired.Add(1)
			return true
		}
	}
	return false
}

// done reports whether every crash happened.
func (s *schedule) done() bool { return int(s.fired.Load()) == len(s.at) }

// crashingStore kills billing between the broker's PubAck and the mark.
type crashingStore struct {
	outbox.Store
	svc *service
	at  *schedule
}

func (c crashingStore) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	if c.at.now() {
		c.svc.crash()
		return fmt.Errorf("billing crashed before marking %d published", len(seqs))
	}
	return c.Store.MarkPublished(ctx, seqs, now)
}

func (c crashingStore) ReleaseLease(ctx context.Context, req outbox.LeaseRequest) error {
	if c.svc.current.Load().dead.Load() {
		return nil // a dead process releases nothing
	}
	return c.Store.ReleaseLease(ctx, req)
}

// crashingPublisher kills billing after its commit and before the relay
// publishes.
type crashingPublisher struct {
	outbox.Publisher
	svc *service
	at  *schedule
}

func (c crashingPublisher) Publish(ctx context.Context, recs []outbox.Record) []error {
	if c.at.now() {
		c.svc.crash()
		errs := make([]error, len(recs))
		for i := range errs {
			errs[i] = fmt.Errorf("billing crashed before publishing")
		}
		return errs
	}
	return c.Publisher.Publish(ctx, recs)
}

// TestChainEffectivelyOnce runs billing and shipping with crashes on both
// sides: billing between its commit and its ack of the order (twice),
// between its commit and the relay's publish, and between JetStream's
// PubAck and the relay's mark; shipping between its commit and its ack
// (twice). Every order is charged once, every charge is one outgoing
// message, and every charge is shipped once.
func TestChainEffectivelyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, _, pgURL := pgtest.Schema(t, "outbox_chain")
	cfg := config{
		NATSURL:     testenv.NATS.Need(t),
		PostgresURL: pgURL,
		ShippingDB:  filepath.Join(t.TempDir(), "shipping.db"),
		Prefix:      fmt.Sprintf("chain%d_", time.Now().UnixNano()),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		AckWait:     time.Second, RelayLease: time.Second, PollInterval: 20 * time.Millisecond, RelayBatch: 5,
		// The shortest window the server takes: the relay's repeat after a
		// crash lands after it, as it would after minutes, and only
		// shipping's inbox can remove it.
		ChargedDedupes: 100 * time.Millisecond,
	}
	billing := &service{name: "billing", run: runBilling}
	shipping := &service{name: "shipping", run: runShipping}

	var billingDups, shippingDups atomic.Int32
	billingCrash, shippingCrash := crashAt(3, 12), crashAt(5, 15)
	cfg.billingHooks = broker.Hooks[jetstream.Msg]{BeforeSettle: func(_ context.Context, _ jetstream.Msg, r broker.Report) {
		switch r.Result.Outcome {
		case idem.OutcomeProcessed:
			if billingCrash.now() {
				billing.crash() // committed, not acked
			}
		case idem.OutcomeDuplicate:
			billingDups.Add(1)
		}
	}}
	cfg.shippingHooks = broker.Hooks[jetstream.Msg]{BeforeSettle: func(_ context.Context, _ jetstream.Msg, r broker.Report) {
		switch r.Result.Outcome {
		case idem.OutcomeProcessed:
			if shippingCrash.now() {
				shipping.crash()
			}
		case idem.OutcomeDuplicate:
			shippingDups.Add(1)
		}
	}}
	markCrash, publishCrash := crashAt(4), crashAt(2)
	cfg.relayStore = func(s outbox.Store) outbox.Store { return crashingStore{s, billing, markCrash} }
	cfg.publisher = func(p outbox.Publisher) outbox.Publisher { return crashingPublisher{p, billing, publishCrash} }

	// The shop places 40 orders, re-sending every fourth.
	nc, js, err := connect(ctx, cfg, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const orders = 40
	for i := range orders {
		o := order{ID: fmt.Sprintf("order-%02d", i), AmountCents: int64(100 + i)}
		for range 1 + btoi(i%4 == 0) {
			if err := placeOrder(ctx, js, cfg, o); err != nil {
				t.Fatal(err)
			}
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range []*service{billing, shipping} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.loop(t, runCtx, cfg)
		}()
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	shipDB, err := sql.Open("sqlite", cfg.ShippingDB+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer shipDB.Close()

	// Done when every order is shipped, the outbox is empty, both
	// consumers have nothing left to deliver or to be acked, and every
	// crash has happened.
	for {
		shipped := count(t, shipDB, `SELECT COUNT(DISTINCT order_id) FROM shipments`)
		if shipped == orders && outboxDrained(ctx, pool) && idle(ctx, js, cfg, "ORDERS", "billing") &&
			idle(ctx, js, cfg, "CHARGED", "shipping") && billingCrash.done() && shippingCrash.done() &&
			markCrash.done() && publishCrash.done() {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not done: %d of %d shipped, billing started %d times, shipping %d", shipped, orders,
				billing.starts.Load(), shipping.starts.Load())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
	stop()
	wg.Wait()

	// Billing: one charge per order, one outgoing message per charge.
	if n, d := pgCount(t, pool, `SELECT COUNT(*) FROM charges`), pgCount(t, pool, `SELECT COUNT(DISTINCT order_id) FROM charges`); n != orders || d != orders {
		t.Errorf("charges: %d rows for %d orders, want %d", n, d, orders)
	}
	if n := pgCount(t, pool, `SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NOT NULL`); n != orders {
		t.Errorf("outbox: %d messages published, want %d", n, orders)
	}
	// Shipping: one shipment per charge, although the relay published some
	// charges twice.
	if n := count(t, shipDB, `SELECT COUNT(*) FROM shipments`); n != orders {
		t.Errorf("shipments: %d rows for %d orders", n, orders)
	}
	info, err := js.Stream(context.Background(), cfg.stream("CHARGED"))
	if err != nil {
		t.Fatal(err)
	}
	stored := info.CachedInfo().State.Msgs
	if stored <= orders {
		t.Errorf("billing.charged holds %d messages: the relay's repeat after the crash between PubAck and mark never reached the stream", stored)
	}
	if shippingDups.Load() == 0 || billingDups.Load() == 0 {
		t.Errorf("duplicates removed: billing %d, shipping %d; want some on each side", billingDups.Load(), shippingDups.Load())
	}
	t.Logf("billing started %d times, shipping %d; billing.charged holds %d messages for %d charges; duplicates removed: billing %d, shipping %d",
		billing.starts.Load(), shipping.starts.Load(), stored, orders, billingDups.Load(), shippingDups.Load())
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		return -1 // the table is not created yet
	}
	return n
}

func pgCount(t *testing.T, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func outboxDrained(ctx context.Context, pool *pgxpool.Pool) bool {
	var pending int
	err := pool.QueryRow(ctx, `SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL`).Scan(&pending)
	return err == nil && pending == 0
}

// idle reports whether the durable consumer has nothing to deliver and
// nothing waiting for an ack.
func idle(ctx context.Context, js jetstream.JetStream, cfg config, stream, durable string) bool {
	c, err := js.Consumer(ctx, cfg.stream(stream), durable)
	if err != nil {
		return false
	}
	info := c.CachedInfo()
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}
