package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/countdown"
	"github.com/idemgo/idem/store/storekit"
)

// Store is an idem.Store on a PostgreSQL table. It is safe for concurrent
// use; create it with New and the table with Migrate.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	names names
	sql   statements

	plainPaused  countdown.Countdown // ClaimBatch's plain insert paused (plainPause)
	redeliveries redeliveries        // the estimated share of markers whose key is recorded (see redeliveries)
	batchInRC    atomic.Bool         // batches' upserts in READ COMMITTED transactions (see batchGroup)
	recent       *recentKeys         // the keys of the store's latest markers (a hint, see recentKeys)
	forget       func(h uint64)      // recent.forget, for InTx's transactions that do not commit (made once: a method value per transaction is an allocation)
	deferAll     bool                // tests: DeferMark defers every marker it can
}

var (
	_ idem.Store           = (*Store)(nil)
	_ storekit.BatchStore  = (*Store)(nil)
	_ idem.Inspector       = (*Store)(nil)
	_ idem.TxStore[pgx.Tx] = (*Store)(nil)

	_ storekit.MarkDeferrer[pgx.Tx] = (*Store)(nil)
)

// New returns a store over pool. It validates opts (errors wrap
// ErrInvalidTable or idem.ErrInvalidOptions) and does not touch the
// database: call Migrate once at start-up.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres.New with a nil pool", idem.ErrInvalidOptions)
	}
	n, err := opts.validate()
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, opts: opts, names: n, sql: buildStatements(n.table), recent: newRecentKeys()}
	s.forget = s.recent.forget
	return s, nil
}

// Table returns the quoted, possibly schema-qualified table name, for
// callers that query it directly.
func (s *Store) Table() string { return s.names.table }

// querier is what both the pool and a transaction offer.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// maxAttempts bounds how often one claim re-runs its statement because the
// conflicting row was committed after the statement's snapshot (or changed
// again meanwhile). Each retry needs another transaction to commit on the
// same key in between, so a handful is plenty.
const maxAttempts = 16

// micro truncates to PostgreSQL's precision so that the rules applied in Go
// (storekit.ApplyClaim on a row read back) agree with the comparisons made in SQL.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// sweepGranule is the rounding of the indexed sweep_at column; see sweepAt.
const sweepGranule = time.Second

// sweepSlack is how far a row's expires_at may move past its sweep_at before
// an update moves sweep_at too; see sweepAt.
const sweepSlack = time.Minute

// sweepAt rounds a retention end down to the second: the sweep_at a row
// gets when a claim or a marker writes it. The sweep index is on this value
// rather than on expires_at so that the updates after a claim can be HOT
// (no indexed column changed): a complete moves expires_at by the
// handler's duration and a renewal may carry it further, and each leaves
// sweep_at as it is while expires_at stays within sweepSlack of it (see
// keepSweepAt). So sweep_at <= expires_at on every row, and the sweep,
// which looks for sweep_at <= now and checks expires_at on each row it
// finds, deletes a row as soon as it expired; the rows it finds that have
// not expired yet are those whose retention ends within sweepSlack, only
// ever looked at by the last batch of a round. Rounding to the second lets
// the B-tree deduplicate: a second's rows share one posting list.
func sweepAt(expires time.Time) time.Time {
	return expires.Truncate(sweepGranule)
}

func normalize(req idem.ClaimRequest) idem.ClaimRequest {
	req.Now, req.LeaseUntil, req.ExpiresAt = micro(req.Now), micro(req.LeaseUntil), micro(req.ExpiresAt)
	return req
}

// displayArg is the display id to store: empty (NULL) when it equals the
// stored id, which is every id up to idem.MaxIDLen bytes.
func displayArg(k idem.Key) string {
	if d := k.DisplayID(); d != k.StoredID() {
		return d
	}
	return ""
}

// Claim implements idem.Store in one statement (re-run only when a
// concurrent claim committed the key after the statement's snapshot).
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	n, err := prepare(req)
	if err != nil {
		return idem.Claim{}, err
	}
	return s.claimOne(ctx, s.pool, s.sql.claim, n, false)
}

// prepare is storekit.PrepareClaim (the times checked, the fingerprint
// as stored, ExpiresAt raised to LeaseUntil, NewToken drawn), then the times
// truncated to PostgreSQL's microseconds. Every path that writes a record
// takes its request from here, the batch fast paths and the deferred marker
// included. Its errors are Prepare's, as they are.
func prepare(req idem.ClaimRequest) (idem.ClaimRequest, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return req, err
	}
	return normalize(req), nil
}

// recordArgs are $1 .. $9 of the one-key statements (markNew, claim, mark)
// for n, a prepared request: the key, the fingerprint, the times and the
// token of a new row. The claim and mark statements take one more ($10),
// which the capacity leaves room for.
func recordArgs(n idem.ClaimRequest) []any {
	k := n.Key
	return append(make([]any, 0, 10), k.Scope, k.StoredID(), displayArg(k), n.Fingerprint,
		n.Now, n.LeaseUntil, n.ExpiresAt, sweepAt(n.ExpiresAt), n.NewToken)
}

// retryable reports whether a statement that ran on its own (not inside a
// caller's transaction) can simply run again: a serialization failure (the
// server's default isolation is REPEATABLE READ or stricter and the key was
// committed after the snapshot) or a deadlock (two batches taking over the
// same expired rows in opposite orders). Inside a caller's transaction the
// transaction is aborted and the error goes back to the caller.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// claimOne runs the claim (or with mark, the mark) statement for req, a
// request from prepare.
func (s *Store) claimOne(ctx context.Context, q querier, query string, req idem.ClaimRequest, mark bool) (idem.Claim, error) {
	_, standalone := q.(*pgxpool.Pool)
	op := "claim"
	if mark {
		op = "mark"
	}
	k := req.Key
	args := append(recordArgs(req), req.TakeOverStale && !mark)
	for range maxAttempts {
		var (
			acquired bool
			rr       rowRecord
		)
		dest := append([]any{&acquired}, rr.dest()...)
		err := q.QueryRow(ctx, query, args...).Scan(dest...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The row that blocked the insert was committed after this
			// statement's snapshot (or deleted since): run it again.
			continue
		case standalone && retryable(err):
			continue
		case err != nil:
			return idem.Claim{}, wrapErr(op, err)
		}
		c, ok := resolve(acquired, rr.record(), rr.retaken, req, mark)
		if ok {
			return c, nil
		}
	}
	return idem.Claim{}, fmt.Errorf("postgres: %s %s: the record kept changing under %d attempts", op, k, maxAttempts)
}

// resolve turns one statement's answer into a claim. A row that was not
// acquired is the statement snapshot's version; if the rules say it could
// have been acquired, that version is older than the one the upsert saw and
// ok is false: run the statement again.
func resolve(acquired bool, r idem.Record, retaken bool, req idem.ClaimRequest, mark bool) (c idem.Claim, ok bool) {
	if acquired {
		return idem.Claim{Outcome: idem.ClaimAcquired, Record: r, Retaken: retaken}, true
	}
	apply := storekit.ApplyClaim
	if mark {
		apply = storekit.ApplyMark
	}
	c, write := apply(&r, req)
	if write {
		return idem.Claim{}, false
	}
	return c, true
}

// Complete implements idem.Store: a fenced update; no row means the token is
// no longer current (idem.ErrLeaseLost). A request without its times is
// rejected by storekit.PrepareComplete.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	exp := micro(req.ExpiresAt)
	return s.fenced(ctx, "complete", s.sql.complete, req.Key.Scope, req.Key.StoredID(), req.Token,
		req.Result, exp, sweepAt(exp), micro(req.Now))
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if _, err := storekit.PrepareRelease(req); err != nil {
		return err
	}
	return s.fenced(ctx, "release", s.sql.release, req.Key.Scope, req.Key.StoredID(), req.Token, micro(req.Now))
}

// Renew implements idem.Store: LeaseUntil = req.LeaseUntil and ExpiresAt =
// max(ExpiresAt, req.LeaseUntil), so a lease renewed past the retention
// carries the expiry with it.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	lease := micro(req.LeaseUntil)
	return s.fenced(ctx, "renew", s.sql.renew, req.Key.Scope, req.Key.StoredID(), req.Token,
		lease, micro(req.Now), sweepAt(lease))
}

// fenced runs one fenced update on its own. A serialization failure or a
// deadlock (a server whose default isolation is REPEATABLE READ fails an
// update of a row changed after the statement's snapshot) rolled the
// statement back, so it runs again, on a fresh snapshot that re-checks the
// token.
func (s *Store) fenced(ctx context.Context, op, query string, args ...any) error {
	var err error
	for range maxAttempts {
		var tag pgconn.CommandTag
		tag, err = s.pool.Exec(ctx, query, args...)
		switch {
		case retryable(err) && ctx.Err() == nil:
			continue
		case err != nil:
			return wrapErr(op, err)
		case tag.RowsAffected() == 0:
			return idem.ErrLeaseLost
		}
		return nil
	}
	return wrapErr(op, err)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	var rr rowRecord
	err := s.pool.QueryRow(ctx, s.sql.get, key.Scope, key.StoredID()).Scan(rr.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, wrapErr("get", err)
	}
	return rr.record(), nil
}

// wrapErr names the operation. The driver's error stays reachable with
// errors.Is / errors.As (*pgconn.PgError, context errors, net errors); the
// guard treats it as a retryable store failure. A data exception (SQLSTATE
// class 22: a value the server cannot take, such as a time out of
// timestamptz's range) is an *idem.InvalidDataError instead: the same
// message would fail the same way forever, so it is permanent.
func wrapErr(op string, err error) error {
	if se := missingTable(err); se != nil {
		return fmt.Errorf("postgres: %s: %w", op, se)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("postgres: %w", err)}
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// Ping reports whether PostgreSQL answers (storekit.Pinger): DoTx asks
// after a handler failed, to tell a server restarted mid-transaction from
// the handler's own failure.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }
