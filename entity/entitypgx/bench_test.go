package entitypgx_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

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

// parallel8 runs op from 8 workers over b.N distinct keys.
func parallel8(b *testing.B, op func(ctx context.Context, id string) error) {
	var n atomic.Int64
	run := rand.Uint32() // ids never repeat across runs: a repeat would skip the write
	b.SetParallelism(8 / max(1, runtimeProcs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			id := fmt.Sprintf("o-%d-%d", run, n.Add(1))
			if err := op(ctx, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPostgresModes compares, in one run at 8 workers, the raw business
// insert (one per transaction), entity mode (the same insert, conflict-free,
// with its fingerprint column) and the transactional inbox (marker + the same
// insert).
func BenchmarkPostgresModes(b *testing.B) {
	pool, schema := setup(b)
	insert := "INSERT INTO " + schema + ".orders (order_id, fp, amount) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
	b.Run("raw", func(b *testing.B) {
		parallel8(b, func(ctx context.Context, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, "raw-"+id, "fp", 10)
				return err
			})
		})
	})
	orders := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "order_id", FingerprintColumn: "fp"}
	eg, err := idem.New(entitypgx.NewStore(pool), idem.Options{Scope: "orders"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("entity", func(b *testing.B) {
		parallel8(b, func(ctx context.Context, id string) error {
			_, err := idem.DoTx(ctx, eg, idem.Message{ID: "ent-" + id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				k, _ := idem.KeyFromContext(ctx)
				return nil, orders.Insert(ctx, entitypgx.Querier(tx), k.ID, "fp", []string{"amount"}, []any{10})
			})
			return err
		})
	})
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
	b.Run("inbox", func(b *testing.B) {
		parallel8(b, func(ctx context.Context, id string) error {
			_, err := idem.DoTx(ctx, ig, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, insert, "inbox-"+id, "fp", 10)
				return nil, err
			})
			return err
		})
	})
}
