package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// baseline is the same write as idem's claim, without idem.
type baseline struct {
	name     string // what one does
	manyName string // what many does
	// beyond says, per mode, why idem's side can outrun this baseline
	// (a ratio above 1) beyond a run's noise; "" when only noise can.
	beyond map[string]string
	one    op                                           // one key per call
	many   func(ctx context.Context, w, i, n int) error // n keys in one call
	close  func()
}

func newBaseline(ctx context.Context, h *dsn.Handle, runID string) (*baseline, error) {
	switch {
	case h.SQL != nil:
		return sqlBaseline(ctx, h.SQL, h.Scheme, runID)
	case h.PG != nil:
		return pgBaseline(ctx, h.PG, runID)
	case h.Redis != nil:
		return redisBaseline(h.Redis, runID), nil
	case h.Scheme == "memory":
		return memBaseline(), nil
	}
	if ms, ok := h.Native.(*mongoidem.Store); ok {
		return mongoBaseline(ms, runID), nil
	}
	return nil, fmt.Errorf("%w: no baseline for the %s store", ErrMode, h.Scheme)
}

// memBaseline inserts into a map under a mutex, as the memory store does
// with its records.
func memBaseline() *baseline {
	var (
		mu sync.Mutex
		m  = map[string]struct{}{}
	)
	put := func(k string) {
		if _, ok := m[k]; !ok {
			m[k] = struct{}{}
		}
	}
	return &baseline{
		name:     "map insert under a mutex",
		manyName: "map inserts under one mutex hold",
		one: func(_ context.Context, w, i int) (int, error) {
			k := fmt.Sprintf("k-%d-%d", w, i)
			mu.Lock()
			put(k)
			mu.Unlock()
			return 1, nil
		},
		many: func(_ context.Context, w, i, n int) error {
			mu.Lock()
			defer mu.Unlock()
			for j := range n {
				put(fmt.Sprintf("k-%d-%d-%d", w, i, j))
			}
			return nil
		},
		close: func() {},
	}
}

// sqlBaseline inserts keys into a scratch table with a conflict-free insert,
// one transaction per call, and drops the table afterwards.
func sqlBaseline(ctx context.Context, db *sql.DB, dialect, runID string) (*baseline, error) {
	table := "idem_bench_baseline_" + runID
	ins, tail := "INSERT INTO "+table+" (k) VALUES ", " ON CONFLICT DO NOTHING"
	if dialect == "mysql" {
		ins, tail = "INSERT IGNORE INTO "+table+" (k) VALUES ", ""
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (k VARCHAR(200) NOT NULL PRIMARY KEY)"); err != nil {
		return nil, fmt.Errorf("create the baseline's scratch table: %w", err)
	}
	inTx := func(ctx context.Context, q string, args ...any) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	return &baseline{
		name:     strings.TrimSpace(strings.Replace(ins, table, "…", 1)+"(?)"+tail) + " per transaction",
		manyName: strings.TrimSpace(strings.Replace(ins, table, "…", 1)+"(?),(?),…"+tail) + " (one multi-row insert per transaction)",
		one: func(ctx context.Context, w, i int) (int, error) {
			return 1, inTx(ctx, ins+"(?)"+tail, fmt.Sprintf("k-%d-%d", w, i))
		},
		many: func(ctx context.Context, w, i, n int) error {
			args := make([]any, n)
			for j := range args {
				args[j] = fmt.Sprintf("k-%d-%d-%d", w, i, j)
			}
			return inTx(ctx, ins+strings.TrimSuffix(strings.Repeat("(?),", n), ",")+tail, args...)
		},
		close: func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, _ = db.ExecContext(cctx, "DROP TABLE IF EXISTS "+table)
		},
	}, nil
}
