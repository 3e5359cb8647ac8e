package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
	"github.com/idemgo/idem/store/storetest"
)

// openStore opens a migrated store on a fresh file in t's temporary directory.
func openStore(t testing.TB, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// newDeferredStore builds a store with New over a database whose
// transactions begin DEFERRED (the driver's default), as a caller's own
// *sql.DB often is.
func newDeferredStore(t testing.TB) *sqlite.Store {
	t.Helper()
	db, err := sql.Open(sqlite.DriverName, filepath.Join(t.TempDir(), "app.db")+"?_journal_mode=WAL&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlite.New(db, sqlite.Options{Table: "inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return openStore(t, sqlite.Options{}) })
}

func TestConformanceTx(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[*sql.Tx] { return openStore(t, sqlite.Options{}) })
}

// The same suites over a caller's database that begins DEFERRED
// transactions: the store takes the writer lock itself.
func TestConformanceNewDeferred(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return newDeferredStore(t) })
}

func TestConformanceTxNewDeferred(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[*sql.Tx] { return newDeferredStore(t) })
}

func TestConformanceSyncNormal(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return openStore(t, sqlite.Options{Synchronous: sqlite.SyncNormal}) })
}

func TestInvalidTable(t *testing.T) {
	bad := []string{"idem records", "1records", `x"; drop table y; --`, "a-b", "sqlite_master", "SQLite_x",
		"idem.records", "ünï", strings.Repeat("t", 65)}
	for _, name := range bad {
		_, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Table: name})
		if !errors.Is(err, sqlite.ErrInvalidTable) || !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("Open with Table %q = %v, want ErrInvalidTable and idem.ErrInvalidOptions", name, err)
		}
		if _, err := sqlite.New(&sql.DB{}, sqlite.Options{Table: name}); !errors.Is(err, sqlite.ErrInvalidTable) {
			t.Errorf("New with Table %q = %v, want ErrInvalidTable", name, err)
		}
	}
	for _, name := range []string{"idem_records", "_x", "Inbox2", strings.Repeat("t", 64)} {
		if err := sqlite.ValidateTable(name); err != nil {
			t.Errorf("ValidateTable(%q) = %v", name, err)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		path string
		opts sqlite.Options
		want error
	}{
		{"", sqlite.Options{}, sqlite.ErrInvalidPath},
		{":memory:", sqlite.Options{}, sqlite.ErrInvalidPath},
		{filepath.Join(dir, "a.db?mode=ro"), sqlite.Options{}, sqlite.ErrInvalidPath},
		{filepath.Join(dir, "a.db"), sqlite.Options{BusyTimeout: -time.Second}, idem.ErrInvalidOptions},
		{filepath.Join(dir, "a.db"), sqlite.Options{Synchronous: 7}, idem.ErrInvalidOptions},
	}
	for _, c := range cases {
		if s, err := sqlite.Open(c.path, c.opts); !errors.Is(err, c.want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%q, %+v) = %v, want %v", c.path, c.opts, err, c.want)
		}
	}
	if _, err := sqlite.New(nil, sqlite.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestMigrateIdempotentAndVersioned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Before Migrate the table is missing: a clear error, not a silent pass.
	if _, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: "1"}, Now: storetest.T0,
		LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)}); err == nil ||
		!strings.Contains(err.Error(), "no such table") {
		t.Fatalf("Claim before Migrate = %v, want a missing-table error", err)
	}
	for range 3 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	var v int
	if err := s.DB().QueryRow(`SELECT version FROM `+sqlite.VersionTable+` WHERE table_name = ?`, sqlite.DefaultTable).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != sqlite.SchemaVersion() || v < 1 {
		t.Fatalf("recorded version %d, SchemaVersion %d", v, sqlite.SchemaVersion())
	}
	// Two tables in one database migrate separately.
	other, err := sqlite.New(s.DB(), sqlite.Options{Table: "other_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM ` + sqlite.VersionTable).Scan(&n); err != nil || n != 2 {
		t.Fatalf("version rows = %d, %v; want 2", n, err)
	}
	// The sweep index exists.
	var idx string
	if err := s.DB().QueryRow(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql LIKE '%expires_at%'`,
		sqlite.DefaultTable).Scan(&idx); err != nil {
		t.Fatalf("no expires_at index: %v", err)
	}
	// A table migrated by a newer idem is refused.
	if _, err := s.DB().Exec(`UPDATE `+sqlite.VersionTable+` SET version = version + 1 WHERE table_name = ?`, sqlite.DefaultTable); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, sqlite.ErrSchemaTooNew) {
		t.Fatalf("Migrate over a newer schema = %v, want ErrSchemaTooNew", err)
	}
}

// TestOpenSettings checks the durability settings Open applies on every
// connection of its pool.
func TestOpenSettings(t *testing.T) {
	for _, c := range []struct {
		opts sqlite.Options
		sync int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{sqlite.Options{}, 2}, {sqlite.Options{Synchronous: sqlite.SyncNormal, BusyTimeout: time.Second}, 1}} {
		s := openStore(t, c.opts)
		ctx := context.Background()
		conns := make([]*sql.Conn, 3) // several connections: settings are per connection
		for i := range conns {
			conn, err := s.DB().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conns[i] = conn
			var mode string
			var sync, busy int
			if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
				t.Fatal(err)
			}
			wantBusy := c.opts.BusyTimeout
			if wantBusy == 0 {
				wantBusy = sqlite.DefaultBusyTimeout
			}
			if mode != "wal" || sync != c.sync || busy != int(wantBusy.Milliseconds()) {
				t.Fatalf("conn %d: journal_mode %s synchronous %d busy_timeout %d; want wal %d %d", i, mode, sync, busy, c.sync, wantBusy.Milliseconds())
			}
		}
	}
}

// TestWriteLockAtBegin proves that InTx holds SQLite's writer lock from its
// first statement, for both Open's IMMEDIATE DSN and New's no-op write: a
// second writer on another connection cannot start until the first ends.
func TestWriteLockAtBegin(t *testing.T) {
	for name, s := range map[string]*sqlite.Store{"open": openStore(t, sqlite.Options{}), "new": newDeferredStore(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				conn, err := s.DB().Conn(ctx)
				if err != nil {
					return err
				}
				defer conn.Close()
				if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
					return err
				}
				_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
				if err == nil {
					conn.ExecContext(ctx, "ROLLBACK")
					return errors.New("a second writer began while InTx was open")
				}
				if !strings.Contains(strings.ToLower(err.Error()), "locked") && !strings.Contains(strings.ToLower(err.Error()), "busy") {
					return err
				}
				// Restore the pool's setting before the connection goes back.
				_, err = conn.ExecContext(ctx, "PRAGMA busy_timeout = 5000")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNestedWriteInsideInTx: a store write from inside InTx's fn (instead of
// through tx) cannot get the writer lock while the transaction holds it; it
// fails with ErrBusy after BusyTimeout rather than hanging.
func TestNestedWriteInsideInTx(t *testing.T) {
	s := openStore(t, sqlite.Options{BusyTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	var inner error
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, inner = s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: "nested"}, Now: storetest.T0,
			LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, sqlite.ErrBusy) {
		t.Fatalf("nested Claim = %v, want ErrBusy", inner)
	}
	// Once the transaction ended the key is claimable.
	if c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: "nested"}, Now: storetest.T0,
		LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)}); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Claim after InTx = %v, %v", c.Outcome, err)
	}
}

func TestConformanceInspector(t *testing.T) {
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return openStore(t, sqlite.Options{}) })
}
