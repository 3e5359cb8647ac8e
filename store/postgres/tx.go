package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
)

// InTx implements idem.TxStore: it begins a READ COMMITTED transaction, runs
// fn, and commits when fn returns nil (rolling back otherwise), like
// pgx.BeginFunc.
//
// READ COMMITTED is what the inbox needs: a transaction marking a key that a
// concurrent transaction has just committed must see that marker. Under
// REPEATABLE READ or SERIALIZABLE PostgreSQL reports a serialization failure
// (SQLSTATE 40001) instead; callers that run Mark in such transactions of
// their own get that error and must retry the whole transaction.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return fn(ctx, tx)
	})
}

// Mark implements idem.TxStore: it writes a completed marker for req.Key
// inside tx with one INSERT .. ON CONFLICT DO UPDATE .. WHERE, which never
// raises a unique violation (that would abort the caller's transaction).
//
// When another open transaction has just written the same key, Mark waits
// for it: if it commits, Mark reports ClaimDuplicate (the caller skips its
// business writes); if it rolls back, Mark writes the marker. Either way the
// business writes of exactly one transaction commit.
func (s *Store) Mark(ctx context.Context, tx pgx.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	return s.claimOne(ctx, tx, s.sql.mark, req, true)
}

// MarkBatch is Mark for many keys in one statement, for consumers that
// commit a whole poll (a Kafka batch) in one transaction: the markers of
// every key commit with the batch's business writes. Results are in request
// order; keys must be distinct (ErrDuplicateKeyInBatch). Process the
// messages whose claim is idem.ClaimAcquired and skip the others.
func (s *Store) MarkBatch(ctx context.Context, tx pgx.Tx, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	return s.batch(ctx, tx, s.sql.markBatch, reqs, true)
}

// SaveResult implements idem.TxStore: it stores result on the marker Mark
// wrote in tx. The update changes no indexed column, so it stays on the
// row's page (HOT).
func (s *Store) SaveResult(ctx context.Context, tx pgx.Tx, key idem.Key, result []byte) error {
	tag, err := tx.Exec(ctx, s.sql.saveResult, key.Scope, key.StoredID(), result)
	if err != nil {
		return wrapErr("save result", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: save result: %w: no marker for %s in this transaction", idem.ErrNotFound, key)
	}
	return nil
}
