package mysql

import (
	"context"
	"database/sql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// InTx implements idem.TxStore: it begins a transaction at the server's
// default isolation (REPEATABLE READ unless configured otherwise), runs fn,
// and commits when fn returns nil, rolling back otherwise. It does not retry:
// fn's work is the caller's.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit; ends the transaction on an error or a panic in fn
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Mark implements idem.TxStore: it writes the completed marker for req.Key in
// the caller's transaction tx. req is Prepare'd first, as in Claim: a marker
// that inserts the record takes req.NewToken.
//
// The insert does nothing on an existing key except lock its record
// exclusively: a concurrent transaction marking the same key waits for the
// first to end, then finds its marker (or, after a rollback, inserts its own).
// A locking read then loads the record, because under REPEATABLE READ a plain
// read could answer from a snapshot taken before the other transaction
// committed. Both statements lock one existing record and no gap, at any
// isolation level, so unrelated keys never wait; and no shared lock is ever
// upgraded, so two markers of one key cannot deadlock.
//
// On an existing key the insert sets the session's LAST_INSERT_ID() to the
// record's token (that is how it tells "existed" from "inserted"): take the
// ids of your own inserts from sql.Result.LastInsertId, not from a later
// SELECT LAST_INSERT_ID().
func (s *Store) Mark(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	c, err := s.mark(ctx, tx, req)
	return c, dataErr("mark", err)
}

func (s *Store) mark(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	fresh, _ := storekit.ApplyMark(nil, req)
	inserted, err := s.insertIfAbsent(ctx, tx, fresh.Record)
	if err != nil {
		return idem.Claim{}, err
	}
	if inserted {
		return fresh, nil
	}
	cur, err := sqlrecord.Scan(tx.QueryRowContext(ctx, s.q.getForUpdate, req.Key.Scope, req.Key.StoredID()))
	if err != nil {
		// The insert locked the record, so it cannot have gone.
		return idem.Claim{}, err
	}
	c, write := storekit.ApplyMark(&cur, req)
	if write {
		if _, err := tx.ExecContext(ctx, s.q.update, updateArgs(c.Record)...); err != nil {
			return idem.Claim{}, err
		}
	}
	return c, nil
}

// SaveResult implements idem.TxStore: it stores result on the marker written
// by Mark in tx. A result the server cannot take (over max_allowed_packet) is
// an *idem.InvalidDataError.
func (s *Store) SaveResult(ctx context.Context, tx *sql.Tx, key idem.Key, result []byte) error {
	if err := checkResult(ctx, tx, "save result", result); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q.saveResult, resultArg(result), key.Scope, key.StoredID())
	return resultErr("save result", err)
}
