package outboxpostgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	"github.com/idemgo/idem/outbox/outboxtest"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	"github.com/idemgo/idem/store/postgres"
)

// newStore returns a migrated store in a schema of the test's own.
func newStore(t testing.TB, opts outboxpostgres.Options) (*outboxpostgres.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _, _ := pgtest.Schema(t, "outbox")
	s, err := outboxpostgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

// inTx is outboxtest's InTx on a plain pgx transaction.
func inTx(s *outboxpostgres.Store, pool *pgxpool.Pool) func(context.Context, func(context.Context, outboxtest.Enqueue) error) error {
	return func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
		})
	}
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
		s, pool := newStore(t, outboxpostgres.Options{Clock: clock})
		return outboxtest.Subject{Store: s, InTx: inTx(s, pool)}
	})
}

// TestConformanceNotifyEveryTime runs the suite with a NOTIFY in every
// Enqueue, so every message goes through the statement that also answers
// for conflicts (the default sends one NOTIFY per 20 ms, and single
// messages without a key otherwise take a plain INSERT).
func TestConformanceNotifyEveryTime(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
		s, pool := newStore(t, outboxpostgres.Options{Clock: clock, NotifyInterval: time.Nanosecond})
		return outboxtest.Subject{Store: s, InTx: inTx(s, pool)}
	})
}

// TestConformanceQueue runs the suite with the messages queued in a batch
// sent with a business statement.
func TestConformanceQueue(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
		s, pool := newStore(t, outboxpostgres.Options{Clock: clock, NoNotify: true})
		if _, err := pool.Exec(context.Background(), `CREATE TABLE business (n int)`); err != nil {
			t.Fatal(err)
		}
		return outboxtest.Subject{Store: s, InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error {
					b := &pgx.Batch{}
					b.Queue(`INSERT INTO business VALUES (1)`)
					if err := s.Queue(ctx, b, msgs...); err != nil {
						return err
					}
					return tx.SendBatch(ctx, b).Close()
				})
			})
		}}
	})
}

// TestDoTx: Enqueue inside idem.DoTx on store/postgres, the inbox marker,
// the business writes and the messages in one transaction.
func TestDoTx(t *testing.T) {
	s, pool := newStore(t, outboxpostgres.Options{})
	inbox, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Enqueue", func(t *testing.T) { outboxtest.RunDoTx(t, g, s, s.Enqueue) })
	q, pool2 := newStore(t, outboxpostgres.Options{})
	inbox2, err := postgres.New(pool2, postgres.Options{MarkWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox2.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g2, err := idem.New(inbox2, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	// Queued in a batch with a business statement, on an inbox whose marker
	// travels with the handler's first statement.
	t.Run("QueueMarkWithFirstStatement", func(t *testing.T) {
		if _, err := pool2.Exec(context.Background(), `CREATE TABLE business (n int)`); err != nil {
			t.Fatal(err)
		}
		outboxtest.RunDoTx(t, g2, q, func(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO business VALUES (1)`)
			if err := q.Queue(ctx, b, msgs...); err != nil {
				return err
			}
			return tx.SendBatch(ctx, b).Close()
		})
	})
}

// TestMigrateAddsNotBefore: a table made before Message.NotBefore gets its
// column from Migrate.
func TestMigrateAddsNotBefore(t *testing.T) {
	s, pool := newStore(t, outboxpostgres.Options{})
	outboxenv.NotBeforeAdded(t, outboxtest.Subject{Store: s, InTx: inTx(s, pool)}, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, `ALTER TABLE `+s.Table()+` DROP COLUMN not_before`)
		return err
	}, s.Migrate)
}
