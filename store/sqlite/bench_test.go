package sqlite_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
)

// BenchmarkSQLite compares, on one file database, a plain INSERT per
// transaction (the baseline a consumer pays without idem) with the
// transactional inbox (marker + the same INSERT in one transaction) and the
// two-phase guard (claim, handler, complete: two commits). Every message is
// new. Run with, e.g.:
//
//	go test -run '^$' -bench SQLite -benchtime 2s ./store/sqlite/
func BenchmarkSQLite(b *testing.B) {
	for _, sync := range []struct {
		name string
		mode sqlite.Synchronous
	}{{"full", sqlite.SyncFull}, {"normal", sqlite.SyncNormal}} {
		b.Run("sync="+sync.name, func(b *testing.B) {
			b.Run("raw-insert", func(b *testing.B) { benchRaw(b, sync.mode, true) })
			b.Run("raw-insert-sql-only", func(b *testing.B) { benchRaw(b, sync.mode, false) })
			b.Run("dotx", func(b *testing.B) { benchDoTx(b, sync.mode) })
			b.Run("guard-do", func(b *testing.B) { benchDo(b, sync.mode) })
			b.Run("guard-do-duplicate", func(b *testing.B) { benchDuplicate(b, sync.mode) })
		})
	}
}

func benchStore(b *testing.B, mode sqlite.Synchronous) (*sqlite.Store, *idem.Guard) {
	b.Helper()
	s := openStore(b, sqlite.Options{Synchronous: mode})
	if _, err := s.DB().Exec(chargesDDL); err != nil {
		b.Fatal(err)
	}
	g, err := idem.New(s, idem.Options{Scope: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return s, g
}

// benchRaw inserts one row per transaction: through the store's InTx (its
// in-process writer queue) when viaStore, else with database/sql alone,
// where concurrent writers wait in SQLite's busy handler.
func benchRaw(b *testing.B, mode sqlite.Synchronous, viaStore bool) {
	s, _ := benchStore(b, mode)
	var n atomic.Int64
	ctx := context.Background()
	insert := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, 1)`, strconv.FormatInt(n.Add(1), 10))
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var err error
			if viaStore {
				err = s.InTx(ctx, insert)
			} else {
				err = rawTx(ctx, s.DB(), insert)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func rawTx(ctx context.Context, db *sql.DB, fn func(context.Context, *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func benchDoTx(b *testing.B, mode sqlite.Synchronous) {
	_, g := benchStore(b, mode)
	var n atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := strconv.FormatInt(n.Add(1), 10)
			res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte("1")}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, 1)`, id)
				return nil, err
			})
			if err != nil || res.Outcome != idem.OutcomeProcessed {
				b.Errorf("DoTx: %v %v", res.Outcome, err)
				return
			}
		}
	})
}

func benchDo(b *testing.B, mode sqlite.Synchronous) {
	_, g := benchStore(b, mode)
	var n atomic.Int64
	ctx := context.Background()
	result := []byte("ok")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := strconv.FormatInt(n.Add(1), 10)
			res, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte("1")}, func(context.Context) ([]byte, error) {
				return result, nil
			})
			if err != nil || res.Outcome != idem.OutcomeProcessed {
				b.Errorf("Do: %v %v", res.Outcome, err)
				return
			}
		}
	})
}

// benchDuplicate redelivers one processed message: the claim is answered by
// a read, without the writer lock.
func benchDuplicate(b *testing.B, mode sqlite.Synchronous) {
	_, g := benchStore(b, mode)
	ctx := context.Background()
	msg := idem.Message{ID: "dup", Payload: []byte("1")}
	h := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	if _, err := g.Do(ctx, msg, h); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := g.Do(ctx, msg, h)
			if err != nil || res.Outcome != idem.OutcomeDuplicate {
				b.Errorf("Do: %v %v", res.Outcome, err)
				return
			}
		}
	})
}
