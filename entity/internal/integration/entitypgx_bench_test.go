package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// setup returns a pool and a fresh schema holding an orders table.
func setup(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	url := testenv.Postgres.Need(tb)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 16
	schema := fmt.Sprintf("idem_entity_%d", rand.Uint32())
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+
		".orders (order_id text PRIMARY KEY, fp text, amount bigint)"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	return pool, schema
}

// workers8 runs op n times from 8 goroutines over distinct keys and returns
// the wall time.
func workers8(b *testing.B, n int, op func(ctx context.Context, id string) error) time.Duration {
	var next atomic.Int64
	run := rand.Uint32() // ids never repeat across rounds: a repeat would skip the write
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := op(ctx, fmt.Sprintf("o-%d-%d", run, i)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkPostgresModes compares, at 8 workers, the raw business insert
// (one per transaction), entity mode (the same insert, conflict-free, with
// its fingerprint column, through the guard) and the transactional inbox
// (marker + the same insert). The three run interleaved, 300 messages each
// per round and b.N rounds, so the machine's load hits them alike; the
// metrics are messages per second and the ratios to raw. Raw is what a
// caller writes by hand, pgx.BeginFunc: BEGIN, INSERT and COMMIT, three
// round trips; entity mode's InTx sends its BEGIN with the insert, two.
//
//	go test -run '^$' -bench PostgresModes -benchtime 10x ./entity/internal/integration
func BenchmarkPostgresModes(b *testing.B) {
	pool, schema := setup(b)
	insert := "INSERT INTO " + schema + ".orders (order_id, fp, amount) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
	raw := func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, "raw-"+id, "fp", 10)
			return err
		})
	}
	orders := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "order_id", FingerprintColumn: "fp"}
	eg, err := idem.NewInbox(entitypgx.NewStore(pool), idem.Options{Scope: "orders"})
	if err != nil {
		b.Fatal(err)
	}
	ent := func(ctx context.Context, id string) error {
		_, err := idem.DoTx(ctx, eg, idem.Message{ID: "ent-" + id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			k, _ := idem.KeyFromContext(ctx)
			return nil, orders.Insert(ctx, entitypgx.Querier(tx), k.ID, "fp", []string{"amount"}, []any{10})
		})
		return err
	}
	inbox, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
	if err != nil {
		b.Fatal(err)
	}
	if err := inbox.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	ig, err := idem.New(inbox, idem.Options{Scope: "orders"})
	if err != nil {
		b.Fatal(err)
	}
	inb := func(ctx context.Context, id string) error {
		_, err := idem.DoTx(ctx, ig, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, err := tx.Exec(ctx, insert, "inbox-"+id, "fp", 10)
			return nil, err
		})
		return err
	}
	const perRound = 300
	modes := []func(context.Context, string) error{raw, ent, inb}
	for _, op := range modes { // warm up connections and statement caches
		workers8(b, 50, op)
	}
	var took [3]time.Duration
	b.ResetTimer()
	for round := range b.N {
		for j := range modes {
			m := (round + j) % len(modes) // rotate which goes first
			took[m] += workers8(b, perRound, modes[m])
		}
	}
	rate := func(d time.Duration) float64 { return float64(b.N*perRound) / d.Seconds() }
	b.ReportMetric(rate(took[0]), "raw/s")
	b.ReportMetric(rate(took[1]), "entity/s")
	b.ReportMetric(rate(took[2]), "inbox/s")
	b.ReportMetric(rate(took[1])/rate(took[0]), "entity/raw")
	b.ReportMetric(rate(took[2])/rate(took[0]), "inbox/raw")
}
