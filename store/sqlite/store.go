package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// lock takes the store's in-process writer lock, waiting at most
// BusyTimeout (or until ctx ends).
func (s *Store) lock(ctx context.Context) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case s.wlock <- struct{}{}:
		return s.unlock, nil
	default:
	}
	t := time.NewTimer(s.opts.BusyTimeout)
	defer t.Stop()
	select {
	case s.wlock <- struct{}{}:
		return s.unlock, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("%w after %v", ErrBusy, s.opts.BusyTimeout)
	}
}

func (s *Store) unlock() { <-s.wlock }

// writeTx runs fn in a write transaction that holds SQLite's writer lock from
// its start, so its reads and writes are one serialised step. It commits when
// fn returns nil and rolls back otherwise (also on panic).
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.writeTxLock(ctx, s.q.lockNoop, fn)
}

// writeTxLock is writeTx with the no-op write that takes the lock on
// databases whose transactions begin DEFERRED ("": fn's first statement is a
// write and takes it).
func (s *Store) writeTxLock(ctx context.Context, lockNoop string, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	// Statements the transaction runs are prepared before it takes its
	// connection (see prepared): a pool of one has none to spare after.
	s.stmts.warm(ctx, s.db, lockNoop, s.q.mark, s.q.saveResult, s.q.put, s.q.get)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if !s.immediate && lockNoop != "" {
		if _, err := s.execStmt(ctx, tx, lockNoop); err != nil {
			return fmt.Errorf("sqlite: take the writer lock: %w", err)
		}
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// exec runs one write statement under the writer lock and returns the number
// of rows it changed. A single statement is its own atomic transaction.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	res, err := s.execStmt(ctx, nil, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// get reads the record of key in tx (the database when nil); nil when
// absent.
func (s *Store) get(ctx context.Context, tx *sql.Tx, key idem.Key) (*idem.Record, error) {
	row, err := s.queryRow(ctx, tx, s.q.get, key.Scope, key.StoredID())
	if err != nil {
		return nil, err
	}
	r, err := sqlrecord.Scan(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// claimTx applies the claim rules to the current record inside a write
// transaction: the writer lock makes read, decide and write one step.
func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	cur, err := s.get(ctx, tx, req.Key)
	if err != nil {
		return idem.Claim{}, err
	}
	c, write := storekit.ApplyClaim(cur, req)
	if write {
		if _, err := s.execStmt(ctx, tx, s.q.put, recordArgs(c.Record)...); err != nil {
			return idem.Claim{}, err
		}
	}
	return c, nil
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := prepare(req)
	if err != nil {
		return idem.Claim{}, err
	}
	// Fast path without the writer lock: a read sees one committed state,
	// and when the rules leave that state unchanged (duplicate, in progress,
	// stale) the answer is exactly what a serialised claim at that instant
	// would give. Redelivery storms are answered by parallel readers.
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	cur, err := s.get(ctx, nil, req.Key)
	if err != nil {
		return claimErr(req.Key, err)
	}
	if cur != nil {
		if c, write := storekit.ApplyClaim(cur, req); !write {
			return c, nil
		}
	}
	var c idem.Claim
	err = s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		c, err = s.claimTx(ctx, tx, req)
		return err
	})
	if err != nil {
		return claimErr(req.Key, err)
	}
	return c, nil
}

// claimErr names Claim's failure on k, classifying SQLite's data errors.
func claimErr(k idem.Key, err error) (idem.Claim, error) {
	return idem.Claim{}, dataErr("claim", fmt.Errorf("sqlite: claim %s: %w", k, err))
}

// prepare is storekit.PrepareClaim with the times truncated to the
// milliseconds the table keeps, so a claim decided in Go equals the record
// read back later, and Go's comparisons agree with the SQL ones.
func prepare(req idem.ClaimRequest) (idem.ClaimRequest, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return req, err
	}
	req.Now = req.Now.Truncate(time.Millisecond)
	req.LeaseUntil = req.LeaseUntil.Truncate(time.Millisecond)
	req.ExpiresAt = req.ExpiresAt.Truncate(time.Millisecond)
	return req, nil
}

// owned runs an update guarded by (token, in_progress) and maps "no row
// changed" to idem.ErrLeaseLost.
func (s *Store) owned(ctx context.Context, op string, key idem.Key, query string, args ...any) error {
	n, err := s.exec(ctx, query, args...)
	if err != nil {
		return dataErr(op, fmt.Errorf("sqlite: %s %s: %w", op, key, err))
	}
	if n == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	return s.owned(ctx, "complete", req.Key, s.q.complete,
		nullBytes(req.Result), sqlrecord.MS(req.ExpiresAt), sqlrecord.MS(req.Now), req.Key.Scope, req.Key.StoredID(), req.Token)
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if _, err := storekit.PrepareRelease(req); err != nil {
		return err
	}
	return s.owned(ctx, "release", req.Key, s.q.release,
		sqlrecord.MS(req.Now), sqlrecord.MS(req.Now), req.Key.Scope, req.Key.StoredID(), req.Token)
}

// Renew implements idem.Store. It moves the lease end and carries the
// record's expiry with it (expires_at never ends before the lease), so a
// handler that outlives the retention keeps its key while it renews.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	return s.owned(ctx, "renew", req.Key, s.q.renew,
		sqlrecord.MS(req.LeaseUntil), sqlrecord.MS(req.Now), req.Key.Scope, req.Key.StoredID(), req.Token)
}

// Get implements idem.Store. Reads do not take the writer lock: under WAL
// they see the last commit without waiting for a writer.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	r, err := s.get(ctx, nil, key)
	if err != nil {
		return idem.Record{}, fmt.Errorf("sqlite: get %s: %w", key, err)
	}
	if r == nil {
		return idem.Record{}, idem.ErrNotFound
	}
	return *r, nil
}

// Sweep implements idem.Store: one DELETE of at most req.Limit expired
// records (none when Limit <= 0): settled ones only, never an in-progress
// record, live or stale. SQLite's single writer means concurrent sweepers simply take turns;
// each batch holds the lock briefly.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	n, err := s.exec(ctx, s.q.sweep, sqlrecord.MS(req.Now), req.Limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep: %w", err)
	}
	return int(n), nil
}
