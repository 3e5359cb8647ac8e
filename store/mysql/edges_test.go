package mysql_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/storekit"
)

// The record rules of the Store contract (store/storetest's edge cases) at
// the places this store implements them itself: its SQL for renewals, sweeps
// and statistics, its batch and marker paths, its columns, and its error
// classification. Each test runs in every driver mode.

func mustClaim(t *testing.T, s *mysql.Store, r idem.ClaimRequest, want idem.ClaimOutcome) idem.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), r)
	if err != nil || c.Outcome != want {
		t.Fatalf("Claim(%s) = %v, %v; want %v", r.Key, c.Outcome, err, want)
	}
	return c
}

func mustMark(t *testing.T, s *mysql.Store, r idem.ClaimRequest, want idem.ClaimOutcome) idem.Claim {
	t.Helper()
	var c idem.Claim
	err := s.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		var err error
		c, err = s.Mark(ctx, tx, r)
		return err
	})
	if err != nil || c.Outcome != want {
		t.Fatalf("Mark(%s) = %v, %v; want %v", r.Key, c.Outcome, err, want)
	}
	return c
}

func mustBatch(t *testing.T, s *mysql.Store, reqs ...idem.ClaimRequest) []idem.Claim {
	t.Helper()
	cs, err := s.ClaimBatch(context.Background(), reqs)
	if err != nil || len(cs) != len(reqs) {
		t.Fatalf("ClaimBatch = %d claims, %v", len(cs), err)
	}
	return cs
}

func mustRelease(t *testing.T, s *mysql.Store, c idem.Claim, now time.Time) {
	t.Helper()
	if err := s.Release(context.Background(), idem.ReleaseRequest{Key: c.Record.Key(), Token: c.Record.Token, Now: now}); err != nil {
		t.Fatalf("Release(%s): %v", c.Record.Key(), err)
	}
}

func mustGet(t *testing.T, s *mysql.Store, k idem.Key) idem.Record {
	t.Helper()
	r, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	return r
}

func withToken(r idem.ClaimRequest, token int64) idem.ClaimRequest {
	r.NewToken = token
	return r
}

func withFP(r idem.ClaimRequest, fp string) idem.ClaimRequest {
	r.Fingerprint = fp
	return r
}

// TestTokensFromRequest: a record created by Claim, Mark or either batch path
// takes its request's NewToken; a record that still exists counts on from its
// own token; a key whose record was swept starts again at the request's
// token, never at a number a zombie of the swept record could hold.
func TestTokensFromRequest(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		k := func(id string) idem.Key { return idem.Key{Scope: "tok", ID: id} }
		const base = int64(1) << 40
		check := func(what string, got, want int64) {
			t.Helper()
			if got != want {
				t.Fatalf("%s: token %d, want %d", what, got, want)
			}
		}
		c := mustClaim(t, s, withToken(req(k("claim"), t0), base+1), idem.ClaimAcquired)
		check("Claim", c.Record.Token, base+1)
		check("Mark", mustMark(t, s, withToken(req(k("mark"), t0), base+2), idem.ClaimAcquired).Record.Token, base+2)
		// Every key new: the batch's one-statement path.
		cs := mustBatch(t, s, withToken(req(k("b1"), t0), base+3), withToken(req(k("b2"), t0), base+4))
		check("batch of new keys [0]", cs[0].Record.Token, base+3)
		check("batch of new keys [1]", cs[1].Record.Token, base+4)
		// One key existing (released): the read and write-back path.
		mustRelease(t, s, c, t0)
		cs = mustBatch(t, s, withToken(req(k("claim"), t0.Add(time.Second)), base+50), withToken(req(k("b3"), t0), base+5))
		check("batch reclaim of a released record", cs[0].Record.Token, base+2)
		check("batch, new key beside an existing one", cs[1].Record.Token, base+5)
		for i, id := range []string{"b1", "b2", "b3", "claim"} {
			if got := mustGet(t, s, k(id)).Token; got != []int64{base + 3, base + 4, base + 5, base + 2}[i] {
				t.Fatalf("%s stored with token %d", id, got)
			}
		}

		// Without a NewToken, Prepare draws one per request: far above the
		// small numbers a counter gives, and different for each key.
		drawn := map[int64]bool{}
		for _, tok := range []int64{
			mustClaim(t, s, req(k("drawn-1"), t0), idem.ClaimAcquired).Record.Token,
			mustMark(t, s, req(k("drawn-2"), t0), idem.ClaimAcquired).Record.Token,
		} {
			drawn[tok] = tok >= 1<<32
		}
		for _, c := range mustBatch(t, s, req(k("drawn-3"), t0), req(k("drawn-4"), t0)) {
			drawn[c.Record.Token] = c.Record.Token >= 1<<32
		}
		for tok, ok := range drawn {
			if !ok {
				t.Fatalf("drawn token %d is below 2^32", tok)
			}
		}
		if len(drawn) != 4 {
			t.Fatalf("4 drawn tokens, %d distinct: %v", len(drawn), drawn)
		}

		// Swept and claimed again: the new lifetime's token is the request's.
		// The claims in progress are released first: only settled records
		// expire.
		for _, id := range []string{"b1", "b2", "b3"} {
			mustRelease(t, s, idem.Claim{Record: mustGet(t, s, k(id))}, t0)
		}
		now := t0.Add(2 * time.Hour)
		for {
			n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		if _, err := s.Get(ctx, k("b1")); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("b1 after the sweep: %v", err)
		}
		check("Claim after the sweep", mustClaim(t, s, withToken(req(k("b1"), now), base+6), idem.ClaimAcquired).Record.Token, base+6)
		check("Mark after the sweep", mustMark(t, s, withToken(req(k("b2"), now), base+7), idem.ClaimAcquired).Record.Token, base+7)
		check("batch after the sweep", mustBatch(t, s, withToken(req(k("b3"), now), base+8))[0].Record.Token, base+8)
	})
}

// TestFingerprintKeptOnRelease: Release keeps the stored fingerprint, and a
// Mark or a batch claim of a released record keeps it too (taking the
// request's only when none is stored); an expired record is a new lifetime
// and takes the request's.
func TestFingerprintKeptOnRelease(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		k := func(id string) idem.Key { return idem.Key{Scope: "fp", ID: id} }
		want := func(what string, r idem.Record, fp string) {
			t.Helper()
			if r.Fingerprint != fp {
				t.Fatalf("%s: fingerprint %q, want %q", what, r.Fingerprint, fp)
			}
		}
		released := func(id, fp string) {
			t.Helper()
			mustRelease(t, s, mustClaim(t, s, withFP(req(k(id), t0), fp), idem.ClaimAcquired), t0)
			want("after Release", mustGet(t, s, k(id)), fp)
		}
		later := t0.Add(time.Second)

		released("mark", "fpA")
		c := mustMark(t, s, withFP(req(k("mark"), later), "fpB"), idem.ClaimAcquired)
		want("Mark of a released record", c.Record, "fpA")
		want("stored by Mark", mustGet(t, s, k("mark")), "fpA")

		released("batch", "fpA")
		cs := mustBatch(t, s, withFP(req(k("batch"), later), "fpB"), req(k("batch-new"), later))
		if cs[0].Outcome != idem.ClaimAcquired {
			t.Fatalf("batch claim of a released record: %v", cs[0].Outcome)
		}
		want("batch claim of a released record", cs[0].Record, "fpA")
		want("stored by the batch", mustGet(t, s, k("batch")), "fpA")

		released("none", "")
		want("Mark of a released record without a fingerprint",
			mustMark(t, s, withFP(req(k("none"), later), "fpN"), idem.ClaimAcquired).Record, "fpN")
		released("none-batch", "")
		want("batch claim of a released record without a fingerprint",
			mustBatch(t, s, withFP(req(k("none-batch"), later), "fpN"))[0].Record, "fpN")

		// Expired: a new lifetime with the new content.
		old := mustClaim(t, s, withFP(req(k("expired"), t0), "fpA"), idem.ClaimAcquired)
		if err := s.Complete(context.Background(), idem.CompleteRequest{Key: k("expired"), Token: old.Record.Token, Now: t0, ExpiresAt: later}); err != nil {
			t.Fatal(err)
		}
		want("Mark of an expired record", mustMark(t, s, withFP(req(k("expired"), t0.Add(time.Minute)), "fpB"), idem.ClaimAcquired).Record, "fpB")
	})
}

// TestRawFingerprintEveryPath: raw digest bytes as the fingerprint go
// through Prepare on every path that writes one (Claim, Mark, both batch
// paths): stored as StoredFingerprint's text, and equal to themselves on
// the next claim.
func TestRawFingerprintEveryPath(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		sum := sha256.Sum256([]byte("payload"))
		raw := string(sum[:])
		stored := storekit.StoredFingerprint(raw)
		k := func(id string) idem.Key { return idem.Key{Scope: "raw", ID: id} }
		r := func(id string, now time.Time) idem.ClaimRequest { return withFP(req(k(id), now), raw) }
		mustClaim(t, s, r("claim", t0), idem.ClaimAcquired)
		mustMark(t, s, r("mark", t0), idem.ClaimAcquired)
		mustBatch(t, s, r("batch-new-1", t0), r("batch-new-2", t0))
		mustRelease(t, s, mustClaim(t, s, req(k("batch-old"), t0), idem.ClaimAcquired), t0)
		if c := mustBatch(t, s, r("batch-old", t0), r("batch-new-3", t0)); c[1].Record.Fingerprint != stored {
			t.Fatalf("new key beside an existing one: fingerprint %q", c[1].Record.Fingerprint)
		}
		for _, id := range []string{"claim", "mark", "batch-new-1", "batch-new-2", "batch-new-3"} {
			if got := mustGet(t, s, k(id)).Fingerprint; got != stored {
				t.Fatalf("%s: fingerprint stored as %q, want %q", id, got, stored)
			}
		}
		// The next claims compare equal: in progress, duplicate, not a conflict.
		if c := mustClaim(t, s, r("claim", t0), idem.ClaimInProgress); c.Record.Fingerprint != stored {
			t.Fatalf("reclaim: %q", c.Record.Fingerprint)
		}
		if c := mustMark(t, s, r("mark", t0), idem.ClaimDuplicate); c.Record.Fingerprint != stored {
			t.Fatalf("Mark again: %q", c.Record.Fingerprint)
		}
	})
}

// TestZeroTimesWriteNothing: a request without its times fails Prepare
// before any statement: Mark, and a batch in which one request of several
// lacks them, write nothing.
func TestZeroTimesWriteNothing(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		good, bad := req(idem.Key{Scope: "z", ID: "good"}, t0), req(idem.Key{Scope: "z", ID: "bad"}, t0)
		bad.ExpiresAt = time.Time{}
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.Mark(ctx, tx, bad)
			return err
		})
		if !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
			t.Fatalf("Mark with zero ExpiresAt: %v", err)
		}
		if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{good, bad}); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("ClaimBatch with one zero ExpiresAt: %v", err)
		}
		for _, k := range []idem.Key{good.Key, bad.Key} {
			if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("%s after the rejected requests: %v", k, err)
			}
		}
	})
}

// TestRenewCarriesExpiry: Renew moves expires_at to the lease end when the
// lease outlives it, and never moves it earlier.
func TestRenewCarriesExpiry(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		k := idem.Key{Scope: "renew", ID: "carry"}
		r := req(k, t0)
		r.ExpiresAt = t0.Add(30 * time.Second)
		c := mustClaim(t, s, r, idem.ClaimAcquired)
		renew := func(now, until time.Time) {
			t.Helper()
			if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: now, LeaseUntil: until}); err != nil {
				t.Fatalf("Renew to %v: %v", until, err)
			}
		}
		expect := func(lease, expires time.Time) {
			t.Helper()
			got := mustGet(t, s, k)
			if !got.LeaseUntil.Equal(lease) || !got.ExpiresAt.Equal(expires) {
				t.Fatalf("lease until %v, expires %v; want %v, %v", got.LeaseUntil, got.ExpiresAt, lease, expires)
			}
		}
		renew(t0.Add(5*time.Second), t0.Add(20*time.Second)) // inside the retention: expiry unchanged
		expect(t0.Add(20*time.Second), t0.Add(30*time.Second))
		renew(t0.Add(15*time.Second), t0.Add(time.Minute)) // past it: carried
		expect(t0.Add(time.Minute), t0.Add(time.Minute))
		renew(t0.Add(16*time.Second), t0.Add(40*time.Second)) // a shorter lease: the expiry stays
		expect(t0.Add(40*time.Second), t0.Add(time.Minute))
	})
}

// TestOlderRowsLiveLease: rows written by older versions may be in progress
// under a live lease with expires_at already passed (their Renew did not
// carry it), or never expire (expires_at NULL, migration 2's form of their
// 0). Claims, marks, batches, sweeps and statistics treat the first as
// live, the second as kept; an in-progress row whose lease ended is stale,
// never expired nor swept.
func TestOlderRowsLiveLease(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		now := t0.Add(24 * time.Hour)
		ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
		for _, row := range []struct {
			id, state string
			lease     int64
			expires   any
			create    int64
		}{
			{"live", "in_progress", ms(time.Hour), ms(-time.Hour), ms(-2 * time.Hour)},
			{"dead", "in_progress", ms(-time.Minute), ms(-time.Hour), ms(-2 * time.Hour)},
			{"never", "completed", ms(-time.Hour), nil, ms(-2 * time.Hour)},
		} {
			if _, err := db.Exec("INSERT INTO `"+s.Table()+"` (scope, id, display_id, state, fingerprint, result, token, attempts,"+
				" lease_until, expires_at, created_at, updated_at) VALUES ('old', ?, NULL, ?, 'fp', NULL, 1, 1, ?, ?, ?, ?)",
				row.id, row.state, row.lease, row.expires, row.create, row.create); err != nil {
				t.Fatal(err)
			}
		}
		k := func(id string) idem.Key { return idem.Key{Scope: "old", ID: id} }
		stats, err := s.Stats(ctx, now)
		if err != nil || len(stats) != 1 || stats[0].Expired != 0 || stats[0].Stale != 1 || stats[0].InProgress != 2 {
			t.Fatalf("Stats = %+v, %v; want 2 in progress, 1 stale, none expired", stats, err)
		}
		if c := mustClaim(t, s, req(k("live"), now), idem.ClaimInProgress); c.Record.Token != 1 {
			t.Fatalf("live: %+v", c.Record)
		}
		mustMark(t, s, req(k("live"), now), idem.ClaimInProgress)
		mustClaim(t, s, req(k("never"), now), idem.ClaimDuplicate)
		if cs := mustBatch(t, s, req(k("live"), now), req(k("never"), now)); cs[0].Outcome != idem.ClaimInProgress || cs[1].Outcome != idem.ClaimDuplicate {
			t.Fatalf("batch over the older rows: %v, %v", cs[0].Outcome, cs[1].Outcome)
		}
		if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); err != nil || n != 0 {
			t.Fatalf("Sweep = %d, %v; want 0 (in progress, live or stale, and never-expiring)", n, err)
		}
		mustGet(t, s, k("live"))
		mustGet(t, s, k("never"))
		mustGet(t, s, k("dead"))
		park := req(k("dead"), now)
		park.TakeOverStale = false
		mustClaim(t, s, park, idem.ClaimStale)
		// Once the lease ends the record is stale, its retention long over:
		// a retake (with req's TakeOverStale), not a new lifetime.
		c := mustClaim(t, s, req(k("live"), now.Add(time.Hour+time.Second)), idem.ClaimAcquired)
		if !c.Retaken || c.Record.Token != 2 || c.Record.Attempts != 2 {
			t.Fatalf("claim after the lease: %+v (retaken %v)", c.Record, c.Retaken)
		}
	})
}

// TestSweepUsesIndex: the sweep's read of its victims, with the live-lease
// condition, still reads the expires_at index as a range (so each batch costs what it
// deletes, at 100M rows too).
func TestSweepUsesIndex(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	ctx := context.Background()
	var reqs []idem.ClaimRequest
	for i := range 2000 {
		r := req(idem.Key{Scope: "ix", ID: fmt.Sprint("k-", i)}, t0)
		r.ExpiresAt = t0.Add(time.Duration(i) * time.Second)
		reqs = append(reqs, r)
	}
	mustBatch(t, s, reqs...)
	if _, err := db.Exec("ANALYZE TABLE `" + s.Table() + "`"); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(100 * time.Second).UnixMilli()
	rows, err := db.QueryContext(ctx, "EXPLAIN "+s.SweepQuery(), now, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		t.Fatal("EXPLAIN returned no row")
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	plan := map[string]string{}
	for i, c := range cols {
		plan[strings.ToLower(c)] = vals[i].String
	}
	if plan["key"] != "expires_at" || plan["type"] != "range" {
		t.Fatalf("sweep plan %v, want a range read of the expires_at index", plan)
	}
}

// TestDataErrors: values the server refuses (here through columns narrowed
// by hand, as a schema edited by an operator would) are permanent
// *idem.InvalidDataError naming the operation, wrapping the server's error,
// in every driver mode; a lock wait timeout stays retryable.
func TestDataErrors(t *testing.T) {
	long := "fingerprint longer than the column"
	cases := []struct {
		name   string
		alter  string // MODIFY clause, applied after the setup claim
		op     string
		number uint16
		run    func(ctx context.Context, s *mysql.Store, k idem.Key, token int64) error
	}{
		{"TooLongClaim", "fingerprint VARBINARY(4) NOT NULL DEFAULT ''", "claim", 1406,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				_, err := s.Claim(ctx, withFP(req(idem.Key{Scope: "d", ID: "new"}, t0), long))
				return err
			}},
		{"TooLongBatch", "fingerprint VARBINARY(4) NOT NULL DEFAULT ''", "claim batch", 1406,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				_, err := s.ClaimBatch(ctx, []idem.ClaimRequest{withFP(req(idem.Key{Scope: "d", ID: "new"}, t0), long)})
				return err
			}},
		{"TooLongMark", "fingerprint VARBINARY(4) NOT NULL DEFAULT ''", "mark", 1406,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					_, err := s.Mark(ctx, tx, withFP(req(idem.Key{Scope: "d", ID: "new"}, t0), long))
					return err
				})
			}},
		{"IncorrectString", "fingerprint VARCHAR(64) CHARACTER SET ascii NOT NULL DEFAULT ''", "claim", 1366,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				_, err := s.Claim(ctx, withFP(req(idem.Key{Scope: "d", ID: "new"}, t0), "ünïcødé"))
				return err
			}},
		{"IncorrectValue", "created_at DATETIME NULL", "claim", 1292,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				_, err := s.Claim(ctx, req(idem.Key{Scope: "d", ID: "new"}, t0))
				return err
			}},
		{"NotNull", "display_id VARBINARY(1024) NOT NULL DEFAULT ''", "claim", 1048,
			func(ctx context.Context, s *mysql.Store, _ idem.Key, _ int64) error {
				_, err := s.Claim(ctx, req(idem.Key{Scope: "d", ID: "new"}, t0))
				return err
			}},
		{"OutOfRangeRenew", "lease_until INT NOT NULL", "renew", 1264,
			func(ctx context.Context, s *mysql.Store, k idem.Key, token int64) error {
				return s.Renew(ctx, idem.RenewRequest{Key: k, Token: token, Now: t0, LeaseUntil: t0.Add(time.Minute)})
			}},
		{"TooLongResult", "result VARBINARY(4) NULL", "complete", 1406,
			func(ctx context.Context, s *mysql.Store, k idem.Key, token int64) error {
				return s.Complete(ctx, idem.CompleteRequest{Key: k, Token: token, Result: []byte("too long"), Now: t0, ExpiresAt: t0.Add(time.Hour)})
			}},
		{"TooLongSavedResult", "result VARBINARY(4) NULL", "save result", 1406,
			func(ctx context.Context, s *mysql.Store, k idem.Key, _ int64) error {
				return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					return s.SaveResult(ctx, tx, k, []byte("too long"))
				})
			}},
		{"TruncatedRelease", "state ENUM('in_progress', 'completed') NOT NULL", "release", 1265,
			func(ctx context.Context, s *mysql.Store, k idem.Key, token int64) error {
				return s.Release(ctx, idem.ReleaseRequest{Key: k, Token: token, Now: t0})
			}},
	}
	eachMode(t, func(t *testing.T, db *sql.DB) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t, db)
				ctx := context.Background()
				k := idem.Key{Scope: "d", ID: "setup"}
				c := mustClaim(t, s, req(k, t0), idem.ClaimAcquired)
				// The setup row's values may not fit the narrowed column:
				// alter outside strict mode, as a hand edit may have.
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = ''"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+s.Table()+"` MODIFY "+tc.alter); err != nil {
					t.Fatal(err)
				}
				// Never hand the non-strict session back to the pool.
				conn.Raw(func(any) error { return driver.ErrBadConn })
				err = tc.run(ctx, s, k, c.Record.Token)
				var (
					ide *idem.InvalidDataError
					me  *gomysql.MySQLError
				)
				if !errors.As(err, &ide) || ide.Op != tc.op || !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
					t.Fatalf("%s: %v; want a permanent *idem.InvalidDataError for %q", tc.name, err, tc.op)
				}
				if !errors.As(err, &me) || me.Number != tc.number {
					t.Fatalf("%s: %v; want the server's error %d inside", tc.name, err, tc.number)
				}
			})
		}
	})

	// Not data errors: a lock wait timeout is retried later.
	db := openDB(t, true, false)
	s := newStore(t, db)
	ctx := context.Background()
	k := idem.Key{Scope: "d", ID: "locked"}
	c := mustClaim(t, s, req(k, t0), idem.ClaimAcquired)
	s2 := sameTable(t, openImpatient(t), s)
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var tok int64
	if err := holder.QueryRowContext(ctx, "SELECT token FROM `"+s.Table()+"` WHERE scope = 'd' AND id = 'locked' FOR UPDATE").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Claim(ctx, req(k, t0)); err == nil || errors.Is(err, idem.ErrInvalidData) || idem.IsPermanent(err) {
		t.Fatalf("Claim of a locked record: %v; want a retryable lock wait timeout", err)
	}
	if err := s2.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: t0, LeaseUntil: t0.Add(time.Minute)}); err == nil || errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Renew of a locked record: %v; want a retryable lock wait timeout", err)
	}
}

// TestResultOverPacket: a result larger than the server's
// max_allowed_packet is invalid data (with interpolated statements the
// server would close the connection, which the driver reports as a plain
// reset), and nothing is written; a result over 1 MiB that fits is stored.
func TestResultOverPacket(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		var limit int
		if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&limit); err != nil {
			t.Fatal(err)
		}
		huge := make([]byte, limit+1)
		k := idem.Key{Scope: "big", ID: "huge"}
		c := mustClaim(t, s, req(k, t0), idem.ClaimAcquired)
		err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: huge, Now: t0, ExpiresAt: t0.Add(time.Hour)})
		var ide *idem.InvalidDataError
		if !errors.As(err, &ide) || ide.Op != "complete" || !idem.IsPermanent(err) {
			t.Fatalf("Complete with a result over max_allowed_packet: %v; want invalid data", err)
		}
		if r := mustGet(t, s, k); r.State != idem.StateInProgress || len(r.Result) != 0 {
			t.Fatalf("after the refused Complete: %s", r.State)
		}
		err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := s.Mark(ctx, tx, req(idem.Key{Scope: "big", ID: "tx"}, t0)); err != nil {
				return err
			}
			return s.SaveResult(ctx, tx, idem.Key{Scope: "big", ID: "tx"}, huge)
		})
		if !errors.As(err, &ide) || ide.Op != "save result" {
			t.Fatalf("SaveResult over max_allowed_packet: %v; want invalid data", err)
		}
		fits := []byte(strings.Repeat("\\'x", 700_000)) // 2.1 MB, two thirds of it escaped when interpolated
		if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: fits, Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatalf("Complete with a 2 MB result: %v", err)
		}
		if r := mustGet(t, s, k); string(r.Result) != string(fits) {
			t.Fatalf("2 MB result stored as %d bytes", len(r.Result))
		}
	})
}

// TestDisplayIDColumn: display_id is NULL exactly when the key's DisplayID()
// is its StoredID() (the common short id), and holds the original id for the
// ids StoredID hashes (long ones, short ones spelled like a digest), on every
// path that inserts: Record.Key gives the original id back.
func TestDisplayIDColumn(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		long := strings.Repeat("L", idem.MaxIDLen+1)
		lookalike := idem.Key{Scope: "x", ID: long}.StoredID()
		ids := []string{"plain", "sha256:abc", lookalike, long}
		for _, path := range []string{"claim", "mark", "batch"} {
			scope := "disp-" + path
			for _, id := range ids {
				k := idem.Key{Scope: scope, ID: id}
				switch path {
				case "claim":
					mustClaim(t, s, req(k, t0), idem.ClaimAcquired)
				case "mark":
					mustMark(t, s, req(k, t0), idem.ClaimAcquired)
				case "batch":
					mustBatch(t, s, req(k, t0))
				}
				var display sql.NullString
				if err := db.QueryRow("SELECT display_id FROM `"+s.Table()+"` WHERE scope = ? AND id = ?", scope, k.StoredID()).Scan(&display); err != nil {
					t.Fatalf("%s %.20q: %v", path, id, err)
				}
				if wantNull := k.DisplayID() == k.StoredID(); display.Valid == wantNull || display.Valid && display.String != k.DisplayID() {
					t.Fatalf("%s %.20q: display_id %v %.20q (DisplayID %.20q, StoredID %.20q)", path, id, display.Valid, display.String, k.DisplayID(), k.StoredID())
				}
				if got := mustGet(t, s, k).Key(); got != k {
					t.Fatalf("%s %.20q: Record.Key() = %.20q", path, id, got.ID)
				}
			}
		}
	})
}
