package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"sync"
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
	f := newBench(b)
	for _, v := range f.variants() {
		b.Run(v.name, func(b *testing.B) {
			var units atomic.Int64
			start := time.Now()
			parallel(b, func(next func() string) error {
				units.Add(int64(v.units))
				return v.op(next)
			})
			if v.units > 1 {
				b.ReportMetric(float64(units.Load())/time.Since(start).Seconds(), "keys/s")
			}
		})
	}
}

type bench struct {
	s      *mysql.Store
	db     *sql.DB
	g      *idem.Guard
	insert string // the business insert
	biz    string // the business table
}

type variant struct {
	name  string
	units int // keys per op
	op    func(next func() string) error
}

func newBench(b *testing.B) *bench {
	s, err := mysql.Open(dsnWith(b, true, false), mysql.Options{Table: tableName(b)})
	if err != nil {
		b.Fatal(err)
	}
	db := s.DB()
	db.SetMaxIdleConns(2 * workers)
	b.Cleanup(func() { dropStore(b, db, s.Table()); s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	biz := "`" + s.Table() + "_orders`"
	if _, err := db.Exec("CREATE TABLE " + biz + " (order_id VARBINARY(64) NOT NULL PRIMARY KEY, amount BIGINT NOT NULL) ENGINE = InnoDB"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + biz) })
	g, err := idem.New(s, idem.Options{Scope: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return &bench{s: s, db: db, g: g, biz: biz, insert: "INSERT IGNORE INTO " + biz + " (order_id, amount) VALUES (?, 10)"}
}

const batchSize = 500

func (f *bench) variants() []variant {
	ctx := context.Background()
	rawBatch := "INSERT IGNORE INTO " + f.biz + " (order_id, amount) VALUES " + strings.TrimSuffix(strings.Repeat("(?, 10),", batchSize), ",")
	return []variant{
		{"RawInsert", 1, func(next func() string) error {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, f.insert, next()); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		{"Inbox", 1, func(next func() string) error {
			id := next()
			_, err := idem.DoTx(ctx, f.g, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, f.insert, id)
				return nil, err
			})
			return err
		}},
		{"TwoPhase", 1, func(next func() string) error {
			id := next()
			_, err := f.g.Do(ctx, idem.Message{ID: id, Payload: []byte(id)}, func(context.Context) ([]byte, error) {
				return nil, nil
			})
			return err
		}},
		{"RawBatchInsert500", batchSize, func(next func() string) error {
			args := make([]any, batchSize)
			for i := range args {
				args[i] = next()
			}
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, rawBatch, args...); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		{"ClaimBatch500", batchSize, func(next func() string) error {
			now := time.Now()
			reqs := make([]idem.ClaimRequest, batchSize)
			for i := range reqs {
				reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "batch", ID: next()}, Now: now,
					LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)}
			}
			_, err := f.s.ClaimBatch(ctx, reqs)
			return err
		}},
	}
}

// BenchmarkRatios runs the variants of BenchmarkStore interleaved: each
// iteration is a short phase of every variant in turn, 8 workers each, so a
// change in the machine's load hits all of them alike. It reports each
// variant's rate and the ratios the issue asks for (inbox / raw, two-phase /
// raw, batch / raw batch, all in keys per second). Run it with a multiple of
// 5 iterations (-benchtime=20x) so the rotation is complete.
func BenchmarkRatios(b *testing.B) {
	f := newBench(b)
	vs := f.variants()
	var (
		prefix [4]byte
		seq    atomic.Int64
	)
	rand.Read(prefix[:])
	next := func() string { return fmt.Sprintf("%x-%d", prefix, seq.Add(1)) }
	elapsed := make([]time.Duration, len(vs))
	keys := make([]int64, len(vs))
	b.ResetTimer()
	for round := range b.N {
		// Rotate the order, so each variant follows each other one equally
		// often (a phase runs slower right after a batch phase, while the
		// server flushes what the batch wrote).
		for j := range vs {
			i := (round + j) % len(vs)
			v := vs[i]
			ops := 64 // per phase: 8 per worker
			if v.units > 1 {
				ops = 16
			}
			var (
				wg   sync.WaitGroup
				todo atomic.Int64
			)
			todo.Store(int64(ops))
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for todo.Add(-1) >= 0 {
						if err := v.op(next); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed[i] += time.Since(start)
			keys[i] += int64(ops * v.units)
		}
	}
	b.StopTimer()
	// Guard against measuring nothing: every business insert and marker is there.
	var bizRows, markers int64
	if err := f.db.QueryRow("SELECT COUNT(*) FROM " + f.biz).Scan(&bizRows); err != nil {
		b.Fatal(err)
	}
	if err := f.db.QueryRow("SELECT COUNT(*) FROM `" + f.s.Table() + "`").Scan(&markers); err != nil {
		b.Fatal(err)
	}
	wantBiz := keys[0] + keys[1] + keys[3]     // raw, inbox, raw batch
	wantMarkers := keys[1] + keys[2] + keys[4] // inbox, two-phase, batch
	if bizRows != wantBiz || markers != wantMarkers {
		b.Fatalf("%d business rows and %d records, want %d and %d", bizRows, markers, wantBiz, wantMarkers)
	}
	rate := map[string]float64{}
	for i, v := range vs {
		rate[v.name] = float64(keys[i]) / elapsed[i].Seconds()
		b.ReportMetric(rate[v.name], v.name+"_keys/s")
	}
	b.ReportMetric(rate["Inbox"]/rate["RawInsert"], "inbox/raw")
	b.ReportMetric(rate["TwoPhase"]/rate["RawInsert"], "twophase/raw")
	b.ReportMetric(rate["ClaimBatch500"]/rate["RawBatchInsert500"], "batch/rawbatch")
}
