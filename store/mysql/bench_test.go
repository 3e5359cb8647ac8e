package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
)

// workers is the concurrency of every benchmark: RunParallel runs
// parallelism × GOMAXPROCS goroutines.
const workers = 8

func parallel(b *testing.B, fn func(next func() string) error) {
	b.Helper()
	var prefix [4]byte
	rand.Read(prefix[:])
	p := hex.EncodeToString(prefix[:])
	var seq atomic.Int64
	next := func() string { return fmt.Sprintf("%s-%d", p, seq.Add(1)) }
	b.SetParallelism((workers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(next); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkStore compares, at 8 concurrent workers on one pool:
//
//   - RawInsert: the business insert alone, one transaction each
//     (BEGIN; INSERT IGNORE; COMMIT), the baseline;
//   - Inbox: idem.DoTx, the same insert plus the dedup marker in the
//     transaction;
//   - TwoPhase: Guard.Do with an empty handler (claim + complete);
//   - RawBatchInsert500: 500 business rows per multi-row insert and
//     transaction, the baseline for
//   - ClaimBatch500: ClaimBatch of 500 fresh keys (keys/s counts keys).
func BenchmarkStore(b *testing.B) {
	s, err := mysql.Open(dsnWith(b, true, false), mysql.Options{Table: tableName(b)})
	if err != nil {
		b.Fatal(err)
	}
	db := s.DB()
	db.SetMaxIdleConns(2 * workers)
	b.Cleanup(func() { dropStore(b, db, s.Table()); s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	biz := "`" + s.Table() + "_orders`"
	if _, err := db.Exec("CREATE TABLE " + biz + " (order_id VARBINARY(64) NOT NULL PRIMARY KEY, amount BIGINT NOT NULL) ENGINE = InnoDB"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + biz) })
	insert := "INSERT IGNORE INTO " + biz + " (order_id, amount) VALUES (?, 10)"
	g, err := idem.New(s, idem.Options{Scope: "bench"})
	if err != nil {
		b.Fatal(err)
	}

	b.Run("RawInsert", func(b *testing.B) {
		parallel(b, func(next func() string) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, next()); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("Inbox", func(b *testing.B) {
		parallel(b, func(next func() string) error {
			id := next()
			_, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, insert, id)
				return nil, err
			})
			return err
		})
	})
	b.Run("TwoPhase", func(b *testing.B) {
		parallel(b, func(next func() string) error {
			id := next()
			_, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte(id)}, func(context.Context) ([]byte, error) {
				return nil, nil
			})
			return err
		})
	})
	b.Run("RawBatchInsert500", func(b *testing.B) {
		const size = 500
		stmt := "INSERT IGNORE INTO " + biz + " (order_id, amount) VALUES " + strings.TrimSuffix(strings.Repeat("(?, 10),", size), ",")
		var batches atomic.Int64
		start := time.Now()
		parallel(b, func(next func() string) error {
			args := make([]any, size)
			for i := range args {
				args[i] = next()
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
				tx.Rollback()
				return err
			}
			batches.Add(1)
			return tx.Commit()
		})
		b.ReportMetric(float64(batches.Load()*size)/time.Since(start).Seconds(), "keys/s")
	})
	b.Run("ClaimBatch500", func(b *testing.B) {
		const size = 500
		var batches atomic.Int64
		start := time.Now()
		parallel(b, func(next func() string) error {
			now := time.Now()
			reqs := make([]idem.ClaimRequest, size)
			for i := range reqs {
				reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "batch", ID: next()}, Now: now,
					LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)}
			}
			_, err := s.ClaimBatch(ctx, reqs)
			batches.Add(1)
			return err
		})
		b.ReportMetric(float64(batches.Load()*size)/time.Since(start).Seconds(), "keys/s")
	})
}
