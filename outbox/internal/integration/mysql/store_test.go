package outboxmysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	outboxmysql "github.com/idemgo/idem/outbox/mysql"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/store/mysql"
)

// TestConformance runs the suite in each driver mode: interpolated or
// server-side prepared statements, affected rows as changed or as found
// rows.
func TestConformance(t *testing.T) {
	for _, m := range []struct {
		name                   string
		interpolate, foundRows bool
	}{{"Interpolated", true, false}, {"InterpolatedFoundRows", true, true}, {"Prepared", false, false}, {"PreparedFoundRows", false, true}} {
		t.Run(m.name, func(t *testing.T) {
			db := outboxenv.MySQLDB(t, m.interpolate, m.foundRows)
			outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
				s := outboxenv.MySQLStore(t, db, outboxmysql.Options{Clock: clock})
				return outboxenv.SQLSubject(s, db, s.Enqueue)
			})
		})
	}
}

// TestDoTx: Enqueue inside idem.DoTx on store/mysql, the inbox marker, the
// business writes and the messages in one transaction.
func TestDoTx(t *testing.T) {
	db := outboxenv.MySQLDB(t, true, false)
	s := outboxenv.MySQLStore(t, db, outboxmysql.Options{})
	inbox, err := mysql.New(db, mysql.Options{Table: s.Table() + "_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"_inbox", "_inbox_migrations"} {
			db.Exec("DROP TABLE IF EXISTS `" + s.Table() + suffix + "`")
		}
	})
	g, err := idem.New(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunDoTx(t, g, s, s.Enqueue)
}

// TestMigrateAddsNotBefore: a table made before Message.NotBefore gets its
// column from Migrate.
func TestMigrateAddsNotBefore(t *testing.T) {
	db := outboxenv.MySQLDB(t, true, false)
	s := outboxenv.MySQLStore(t, db, outboxmysql.Options{})
	outboxenv.NotBeforeAdded(t, outboxenv.SQLSubject(s, db, s.Enqueue), func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "ALTER TABLE `"+s.Table()+"` DROP COLUMN not_before")
		return err
	}, s.Migrate)
}
