package outboxsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	"github.com/idemgo/idem/outbox/outboxtest"
	outboxsqlite "github.com/idemgo/idem/outbox/sqlite"
	"github.com/idemgo/idem/store/sqlite"
)

// newStore returns a migrated outbox beside an idem inbox in a database
// file of the test's own.
func newStore(t testing.TB, opts outboxsqlite.Options) (*outboxsqlite.Store, *sqlite.Store) {
	t.Helper()
	inbox, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inbox.Close() })
	ctx := context.Background()
	if err := inbox.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := outboxsqlite.New(inbox.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, inbox
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
		s, inbox := newStore(t, outboxsqlite.Options{Clock: clock})
		return outboxtest.Subject{
			Store: s,
			InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
				return inbox.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
				})
			},
			SerialWriters: true,
		}
	})
}

// TestDoTx: Enqueue inside idem.DoTx on store/sqlite, the inbox marker, the
// business writes and the messages in one transaction.
func TestDoTx(t *testing.T) {
	s, inbox := newStore(t, outboxsqlite.Options{})
	g, err := idem.New(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunDoTx(t, g, s, s.Enqueue)
}

// TestMigrateAddsNotBefore: a table made before Message.NotBefore gets its
// column from Migrate.
func TestMigrateAddsNotBefore(t *testing.T) {
	s, inbox := newStore(t, outboxsqlite.Options{})
	outboxenv.NotBeforeAdded(t, outboxenv.SQLSubject(s, inbox.DB(), s.Enqueue), func(ctx context.Context) error {
		_, err := inbox.DB().ExecContext(ctx, `ALTER TABLE "`+s.Table()+`" DROP COLUMN not_before`)
		return err
	}, s.Migrate)
}
