package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// pgBaseline is sqlBaseline on a pgx pool: INSERT .. ON CONFLICT DO NOTHING
// in its own transaction.
func pgBaseline(ctx context.Context, pool *pgxpool.Pool, runID string) (*baseline, error) {
	table := "idem_bench_baseline_" + runID
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (k text PRIMARY KEY)"); err != nil {
		return nil, fmt.Errorf("create the baseline's scratch table: %w", err)
	}
	inTx := func(ctx context.Context, q string, args ...any) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, q, args...)
			return err
		})
	}
	ins := "INSERT INTO " + table + " (k) VALUES "
	return &baseline{
		name:     "INSERT INTO … (k) VALUES ($1) ON CONFLICT DO NOTHING per transaction (pgx.BeginFunc: BEGIN, INSERT, COMMIT)",
		manyName: "INSERT INTO … (k) VALUES ($1),($2),… ON CONFLICT DO NOTHING (one multi-row insert per transaction)",
		beyond: map[string]string{ModeTx: "idem's transaction sends BEGIN in one round trip with its marker, " +
			"where the baseline's pgx.BeginFunc sends it alone: two round trips against three",
			ModeBatch: "a batch claim is one autocommitted statement, the baseline's multi-row insert a transaction " +
				"of three round trips"},
		one: func(ctx context.Context, w, i int) (int, error) {
			return 1, inTx(ctx, ins+"($1) ON CONFLICT DO NOTHING", fmt.Sprintf("k-%d-%d", w, i))
		},
		many: func(ctx context.Context, w, i, n int) error {
			args := make([]any, n)
			ph := make([]string, n)
			for j := range args {
				args[j], ph[j] = fmt.Sprintf("k-%d-%d-%d", w, i, j), fmt.Sprintf("($%d)", j+1)
			}
			return inTx(ctx, ins+strings.Join(ph, ",")+" ON CONFLICT DO NOTHING", args...)
		},
		close: func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, _ = pool.Exec(cctx, "DROP TABLE IF EXISTS "+table)
		},
	}, nil
}

// redisBaseline is SET NX PX: the write idem's claim script makes, without
// the script. Keys expire after a minute.
func redisBaseline(c goredis.UniversalClient, runID string) *baseline {
	key := func(w, i, j int) string { return fmt.Sprintf("idem-bench-baseline:%s:%d-%d-%d", runID, w, i, j) }
	return &baseline{
		name:     "SET key 1 NX PX 60000",
		manyName: "SET key 1 NX PX 60000, pipelined",
		one: func(ctx context.Context, w, i int) (int, error) {
			return 1, c.SetNX(ctx, key(w, i, 0), 1, time.Minute).Err()
		},
		many: func(ctx context.Context, w, i, n int) error {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for j := range n {
					p.SetNX(ctx, key(w, i, j), 1, time.Minute)
				}
				return nil
			})
			return err
		},
		close: func() {},
	}
}
