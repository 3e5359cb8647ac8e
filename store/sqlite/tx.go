package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// InTx implements idem.TxStore[*sql.Tx]: it begins a write transaction that
// holds SQLite's writer lock from its start (BEGIN IMMEDIATE, or a first
// no-op write for databases from New), runs fn, and commits when fn returns
// nil, rolling back otherwise. Concurrent InTx calls therefore run one after
// another, and the second sees the first's marker.
//
// fn must do its writes through tx. Writing through another connection of
// the same database inside fn waits for this transaction's lock, which is
// only released when fn returns: it fails with a busy error.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.writeTx(ctx, fn)
}

// Mark implements idem.TxStore[*sql.Tx]. It writes the completed marker
// with one conflict-free upsert that takes over only absent, expired and
// released records; when the upsert writes nothing it reads the record to
// report why (duplicate, in progress, stale). No statement ever fails on the
// primary key, so the caller's transaction stays usable.
//
// tx may be any transaction on the store's database; to avoid SQLITE_BUSY
// under concurrency it should hold the writer lock from its start (InTx, or a
// database opened with the DSN from DSN).
func (s *Store) Mark(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	if tx == nil {
		return idem.Claim{}, errors.New("sqlite: mark: nil *sql.Tx")
	}
	req, err := prepare(req)
	if err != nil {
		return idem.Claim{}, err
	}
	k := req.Key
	row, err := s.queryRow(ctx, tx, s.q.mark, k.Scope, k.StoredID(), k.DisplayID(), req.Fingerprint,
		sqlrecord.MS(req.LeaseUntil), sqlrecord.MS(req.ExpiresAt), sqlrecord.MS(req.Now), req.NewToken)
	if err != nil {
		return markErr(k, err)
	}
	r, err := sqlrecord.Scan(row)
	if err == nil {
		return idem.Claim{Outcome: idem.ClaimAcquired, Record: r}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return markErr(k, err)
	}
	cur, err := s.get(ctx, tx, k)
	if err != nil {
		return markErr(k, err)
	}
	c, write := storekit.ApplyMark(cur, req)
	if write {
		// The upsert declined a record the rules would take over: the
		// transaction does not see a consistent row (a bug, or a caller's
		// clock far from the stored times). Refuse rather than guess.
		return idem.Claim{}, fmt.Errorf("sqlite: mark %s: record changed under the transaction (state %v)", k, c.Record.State)
	}
	return c, nil
}

// markErr names Mark's failure on k, classifying SQLite's data errors.
func markErr(k idem.Key, err error) (idem.Claim, error) {
	return idem.Claim{}, dataErr("mark", fmt.Errorf("sqlite: mark %s: %w", k, err))
}

// SaveResult implements idem.TxStore[*sql.Tx].
func (s *Store) SaveResult(ctx context.Context, tx *sql.Tx, key idem.Key, result []byte) error {
	if tx == nil {
		return errors.New("sqlite: save result: nil *sql.Tx")
	}
	res, err := s.execStmt(ctx, tx, s.q.saveResult, nullBytes(result), key.Scope, key.StoredID())
	if err != nil {
		return dataErr("save result", fmt.Errorf("sqlite: save result %s: %w", key, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: save result %s: %w", key, err)
	} else if n == 0 {
		return fmt.Errorf("sqlite: save result %s: %w (Mark it in this transaction first)", key, idem.ErrNotFound)
	}
	return nil
}
