package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
	"github.com/idemgo/idem/store/storetest"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The store's own SQL at the edges of the record rules that the conformance
// suite cannot reach through the API: rows written by older versions,
// SQLite's own limits and lock errors.

var (
	t0      = storetest.T0
	edgeKey = idem.Key{Scope: "edges", ID: "k"}
)

func edgeClaim(id string, now time.Time) idem.ClaimRequest {
	return idem.ClaimRequest{Key: idem.Key{Scope: "edges", ID: id}, Fingerprint: "fp", Now: now,
		LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Hour)}
}

// insertRow writes a record as an older version might have left it.
func insertRow(t *testing.T, s *sqlite.Store, id, state string, token int64, lease, expires time.Time) {
	t.Helper()
	_, err := s.DB().Exec(`INSERT INTO `+s.Table()+` (scope, id, display_id, state, fingerprint, result, token, attempts,
		lease_until, expires_at, created_at, updated_at) VALUES ('edges', ?, ?, ?, 'fp', NULL, ?, 1, ?, ?, ?, ?)`,
		id, id, state, token, lease.UnixMilli(), expires.UnixMilli(), t0.UnixMilli(), t0.UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
}

// TestLegacyLiveLeaseNeverExpires: an in-progress row whose expires_at has
// passed but whose lease is live (written before renewals carried the
// expiry) is in progress for Claim, Mark and ClaimBatch, kept by Sweep and
// not counted expired by Stats.
func TestLegacyLiveLeaseNeverExpires(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlite.Options{})
	now := t0.Add(time.Hour)
	insertRow(t, s, "legacy", "in_progress", 7, now.Add(time.Minute), t0.Add(time.Minute))
	if c, err := s.Claim(ctx, edgeClaim("legacy", now)); err != nil || c.Outcome != idem.ClaimInProgress {
		t.Fatalf("Claim = %v, %v; want in progress", c.Outcome, err)
	}
	if cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{edgeClaim("legacy", now)}); err != nil || cs[0].Outcome != idem.ClaimInProgress {
		t.Fatalf("ClaimBatch = %v, %v; want in progress", cs, err)
	}
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		c, err := s.Mark(ctx, tx, edgeClaim("legacy", now))
		if err == nil && c.Outcome != idem.ClaimInProgress {
			t.Errorf("Mark = %v; want in progress", c.Outcome)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0", n, err)
	}
	st, err := s.Stats(ctx, now)
	if err != nil || len(st) != 1 || st[0].Expired != 0 || st[0].InProgress != 1 {
		t.Fatalf("Stats = %+v, %v; want one in progress, none expired", st, err)
	}
	// Once the lease ends the row is stale, never expired: an in-progress
	// record is for the Stale policy, and the sweep leaves it.
	after := now.Add(2 * time.Minute)
	if st, _ := s.Stats(ctx, after); st[0].Expired != 0 || st[0].Stale != 1 {
		t.Fatalf("Stats after the lease = %+v; want stale 1, expired 0", st)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: after, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("Sweep after the lease = %d, %v; want 0", n, err)
	}
	park := edgeClaim("legacy", after)
	if c, err := s.Claim(ctx, park); err != nil || c.Outcome != idem.ClaimStale || c.Record.Token != 7 {
		t.Fatalf("Claim after the lease = %v (token %d), %v; want stale under token 7", c.Outcome, c.Record.Token, err)
	}
}

// TestRenewCarriesExpiry: Renew sets expires_at to the later of itself and
// the new lease end, compared as the stored integers.
func TestRenewCarriesExpiry(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlite.Options{})
	c, err := s.Claim(ctx, edgeClaim("renew", t0))
	if err != nil {
		t.Fatal(err)
	}
	k, tok := c.Record.Key(), c.Record.Token
	// A lease inside the retention leaves the expiry alone.
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: tok, Now: t0.Add(time.Second), LeaseUntil: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(ctx, k); !r.ExpiresAt.Equal(t0.Add(time.Hour)) || !r.LeaseUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after a renewal inside the retention: %+v", r)
	}
	// A lease past it moves the expiry to the lease end.
	until := t0.Add(3*time.Hour + 123*time.Millisecond)
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: tok, Now: t0.Add(2 * time.Hour), LeaseUntil: until}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(ctx, k); !r.ExpiresAt.Equal(until) || !r.LeaseUntil.Equal(until) {
		t.Fatalf("after a renewal past the retention: %+v", r)
	}
	var typ string
	if err := s.DB().QueryRow(`SELECT typeof(expires_at) FROM ` + s.Table() + ` WHERE id = 'renew'`).Scan(&typ); err != nil || typ != "integer" {
		t.Fatalf("expires_at stored as %q, %v; want integer", typ, err)
	}
}

// TestNewTokenTaken: a record created by Claim, ClaimBatch (its insert of
// new keys) or Mark takes the request's NewToken; one drawn by Prepare when
// zero is never a small counter.
func TestNewTokenTaken(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlite.Options{})
	const tok = 1<<40 + 5
	req := func(id string) idem.ClaimRequest { r := edgeClaim(id, t0); r.NewToken = tok; return r }
	c, err := s.Claim(ctx, req("claim"))
	if err != nil || c.Record.Token != tok {
		t.Fatalf("Claim token %d, %v; want %d", c.Record.Token, err, int64(tok))
	}
	cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req("batch-1"), edgeClaim("batch-2", t0)})
	if err != nil || cs[0].Record.Token != tok || cs[1].Record.Token < 1<<32 {
		t.Fatalf("ClaimBatch tokens %d, %d, %v", cs[0].Record.Token, cs[1].Record.Token, err)
	}
	if r, _ := s.Get(ctx, cs[1].Record.Key()); r.Token != cs[1].Record.Token {
		t.Fatalf("batch record token %d, claim said %d", r.Token, cs[1].Record.Token)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		m, err := s.Mark(ctx, tx, req("mark"))
		if err == nil && m.Record.Token != tok {
			t.Errorf("Mark token %d; want %d", m.Record.Token, int64(tok))
		}
		m2, err2 := s.Mark(ctx, tx, edgeClaim("mark-2", t0))
		if err2 == nil && m2.Record.Token < 1<<32 {
			t.Errorf("Mark with a zero NewToken took token %d", m2.Record.Token)
		}
		return errors.Join(err, err2)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMarkReleasedKeepsFingerprint: Mark on a released record keeps its
// fingerprint, display id and creation time and counts on its token; on an
// expired one it starts a new lifetime with the request's.
func TestMarkReleasedKeepsFingerprint(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlite.Options{})
	insertRow(t, s, "released", "released", 9, t0, t0.Add(time.Hour))
	insertRow(t, s, "expired", "completed", 9, t0, t0.Add(time.Minute))
	now := t0.Add(2 * time.Minute)
	mark := func(id string) idem.Record {
		var r idem.Record
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			req := edgeClaim(id, now)
			req.Fingerprint = "other"
			c, err := s.Mark(ctx, tx, req)
			r = c.Record
			if err == nil && c.Outcome != idem.ClaimAcquired {
				t.Errorf("Mark %s = %v", id, c.Outcome)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := mark("released"); r.Fingerprint != "fp" || r.Token != 10 || r.Attempts != 2 || !r.CreatedAt.Equal(t0) {
		t.Fatalf("mark of a released record: %+v", r)
	}
	if r := mark("expired"); r.Fingerprint != "other" || r.Token != 10 || r.Attempts != 1 || !r.CreatedAt.Equal(now) {
		t.Fatalf("mark of an expired record: %+v", r)
	}
}

// TestDataErrorsPermanent: a value over SQLite's length limit is an
// *idem.InvalidDataError (permanent) from Complete and SaveResult, and the
// record is left as it was.
func TestDataErrorsPermanent(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open(sqlite.DriverName, filepath.Join(t.TempDir(), "limit.db")+"?_journal_mode=WAL&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Every connection of the pool gets the limit: hold them all at once,
	// set it on each, and keep them idle.
	const conns = 4
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	var held []*sql.Conn
	for range conns {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqlitedrv.Limit(conn, sqlite3.SQLITE_LIMIT_LENGTH, 4096); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	for _, conn := range held {
		conn.Close()
	}
	s, err := sqlite.New(db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, edgeClaim("big", t0))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8192)
	err = s.Complete(ctx, idem.CompleteRequest{Key: c.Record.Key(), Token: c.Record.Token, Result: big, Now: t0, ExpiresAt: t0.Add(time.Hour)})
	var ide *idem.InvalidDataError
	if !errors.As(err, &ide) || ide.Op != "complete" || !idem.IsPermanent(err) || !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Complete with a result over the length limit = %v; want an *idem.InvalidDataError", err)
	}
	if r, _ := s.Get(ctx, c.Record.Key()); r.State != idem.StateInProgress {
		t.Fatalf("record after the refused Complete: %+v", r)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.Mark(ctx, tx, edgeClaim("big-tx", t0)); err != nil {
			return err
		}
		return s.SaveResult(ctx, tx, idem.Key{Scope: "edges", ID: "big-tx"}, big)
	})
	if !errors.As(err, &ide) || ide.Op != "save result" || !idem.IsPermanent(err) {
		t.Fatalf("SaveResult over the length limit = %v; want an *idem.InvalidDataError", err)
	}
	// Within the limit all is well.
	if err := s.Complete(ctx, idem.CompleteRequest{Key: c.Record.Key(), Token: c.Record.Token, Result: big[:100], Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// TestBusyStaysRetryable: a write that finds the database locked by another
// connection (SQLITE_BUSY) or waits out the store's own lock (ErrBusy) is a
// retryable store failure, not invalid data.
func TestBusyStaysRetryable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := sqlite.Open(path, sqlite.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open(sqlite.DriverName, path+"?_journal_mode=WAL&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(ctx, edgeClaim("busy", t0))
	var se *sqlitedrv.Error
	if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("Claim while another connection writes = %v; want SQLITE_BUSY", err)
	}
	if errors.Is(err, idem.ErrInvalidData) || idem.IsPermanent(err) {
		t.Fatalf("SQLITE_BUSY classified permanent: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.Claim(ctx, edgeClaim("nested", t0))
		return err
	})
	if !errors.Is(err, sqlite.ErrBusy) || errors.Is(err, idem.ErrInvalidData) || idem.IsPermanent(err) {
		t.Fatalf("nested Claim = %v; want ErrBusy, retryable", err)
	}
}

// TestBatchRejectsBeforeWriting: one request without its times fails the
// whole batch with an *idem.InvalidDataError before anything is written.
func TestBatchRejectsBeforeWriting(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlite.Options{})
	bad := edgeClaim("bad", t0)
	bad.ExpiresAt = time.Time{}
	_, err := s.ClaimBatch(ctx, []idem.ClaimRequest{edgeClaim("good", t0), bad})
	if !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("ClaimBatch = %v; want ErrInvalidData", err)
	}
	if _, err := s.Get(ctx, idem.Key{Scope: "edges", ID: "good"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the batch's valid request was written: %v", err)
	}
}
