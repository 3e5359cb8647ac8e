package outboxpostgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	"github.com/idemgo/idem/store/postgres"
)

// benchWorkers is the concurrency of the enqueue benchmark, as the issue asks.
const benchWorkers = 8

// BenchmarkEnqueueRatio measures enqueueing one message inside an existing
// transaction against the same transaction without it, in one run,
// interleaved round by round (in alternating order, so that load on the
// machine hits every kind alike), at 8 workers:
//
//   - raw: BEGIN, the business insert, COMMIT;
//   - enqueue: the same with Enqueue of one message between the insert and
//     the COMMIT (one more statement), with NOTIFY (the default);
//   - nonotify: the same with Options.NoNotify;
//   - ordered: the same with an OrderingKey per order (the advisory lock
//     travels in the same statement);
//   - queued: the business insert and the message in one batch (Queue):
//     BEGIN, the batch, COMMIT, the round trips of raw;
//   - inbox: idem.DoTx on store/postgres with the business insert (the
//     inbox marker with BEGIN, the insert, COMMIT), the transaction of a
//     consumer that emits a message;
//   - inbox+enqueue and inbox+queued: the same with the message, by
//     Enqueue after the insert or queued with it.
//
// Ratios: enqueue, nonotify, ordered and queued to raw; inbox+enqueue and
// inbox+queued to inbox.
//
// Each of the b.N rounds runs 1000 transactions of each kind. Metrics are
// transactions per second and each kind's ratio to raw.
func BenchmarkEnqueueRatio(b *testing.B) {
	s, pool := newStore(b, outboxpostgres.Options{})
	quiet, err := outboxpostgres.New(pool, outboxpostgres.Options{NoNotify: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE charges (order_id text PRIMARY KEY, amount bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"order_id":"o-0000000000","amount_cents":12345,"currency":"EUR","customer":"c-42","at":"2030-01-02T03:04:05Z"}`)
	charge := func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, id, 12345)
		return err
	}
	type mode struct {
		name string
		tx   func(ctx context.Context, tx pgx.Tx, id string) error
		run  func(ctx context.Context, id string) error // instead of tx in a plain transaction
		base int                                        // the mode it is compared with
	}
	inbox, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := inbox.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	g, err := idem.New(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		b.Fatal(err)
	}
	doTx := func(fn func(ctx context.Context, tx pgx.Tx, id string) error) func(ctx context.Context, id string) error {
		return func(ctx context.Context, id string) error {
			_, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: payload}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return nil, fn(ctx, tx, id)
			})
			return err
		}
	}
	enqueue := func(ctx context.Context, tx pgx.Tx, id string) error {
		if err := charge(ctx, tx, id); err != nil {
			return err
		}
		return s.Enqueue(ctx, tx, outbox.Message{Destination: "billing.charged", Payload: payload}) // id derived from the inbound key
	}
	queued := func(ctx context.Context, tx pgx.Tx, id string) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, id, 12345)
		if err := s.Queue(ctx, b, outbox.Message{ID: id, Destination: "billing.charged", Payload: payload}); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	}
	modes := []mode{
		{name: "raw", tx: charge},
		{name: "enqueue", tx: func(ctx context.Context, tx pgx.Tx, id string) error {
			if err := charge(ctx, tx, id); err != nil {
				return err
			}
			return s.Enqueue(ctx, tx, outbox.Message{ID: id, Destination: "billing.charged", Payload: payload})
		}},
		{name: "nonotify", tx: func(ctx context.Context, tx pgx.Tx, id string) error {
			if err := charge(ctx, tx, id); err != nil {
				return err
			}
			return quiet.Enqueue(ctx, tx, outbox.Message{ID: id, Destination: "billing.charged", Payload: payload})
		}},
		{name: "ordered", tx: func(ctx context.Context, tx pgx.Tx, id string) error {
			if err := charge(ctx, tx, id); err != nil {
				return err
			}
			return s.Enqueue(ctx, tx, outbox.Message{ID: id, Destination: "billing.charged", OrderingKey: id, Payload: payload})
		}},
		{name: "queued", tx: queued},
		{name: "inbox", run: doTx(charge)},
		{name: "inbox+enqueue", run: doTx(enqueue), base: 5},
		{name: "inbox+queued", run: doTx(queued), base: 5},
	}
	const perRound = 1000
	elapsed := make([]time.Duration, len(modes))
	var seq atomic.Int64
	round := func(m mode) time.Duration {
		start := time.Now()
		var n atomic.Int64
		var wg sync.WaitGroup
		for range benchWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n.Add(1) <= perRound {
					id := fmt.Sprintf("%s-%d", m.name, seq.Add(1))
					run := m.run
					if run == nil {
						run = func(ctx context.Context, id string) error {
							return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return m.tx(ctx, tx, id) })
						}
					}
					if err := run(ctx, id); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	warm(b, pool)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := slices.Clone(modes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			elapsed[slices.IndexFunc(modes, func(x mode) bool { return x.name == m.name })] += round(m)
		}
	}
	b.StopTimer()
	rate := func(i int) float64 { return float64(perRound*b.N) / elapsed[i].Seconds() }
	for i, m := range modes {
		b.ReportMetric(rate(i), m.name+"/s")
		if i > 0 && m.run == nil || m.base > 0 {
			b.ReportMetric(rate(i)/rate(m.base), m.name+"/"+modes[m.base].name)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// warm opens the pool's connections before the clock starts.
func warm(b *testing.B, pool *pgxpool.Pool) {
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pool.Exec(context.Background(), `SELECT 1`); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}
