package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgxtx"
	"github.com/idemgo/idem/store/storekit"
)

// InTx implements idem.TxStore: it runs fn in a READ COMMITTED transaction
// and commits when fn returns nil, rolling back otherwise (or on a panic),
// like pgx.BeginTxFunc.
//
// The BEGIN is not sent on its own: it travels with fn's first statement
// (pgx's Batch.BeginTx). With idem.DoTx that statement is the marker, so the
// inbox costs the business transaction exactly one statement and no extra
// round trip.
//
// READ COMMITTED is what the inbox needs: a transaction marking a key that a
// concurrent transaction has just committed must see that marker. Under
// REPEATABLE READ or SERIALIZABLE PostgreSQL reports a serialization failure
// (SQLSTATE 40001) instead; callers that run Mark in such transactions of
// their own get that error and must retry the whole transaction.
//
// With Options.MarkWithFirstStatement, idem.DoTx's marker travels with fn's
// first statement instead (DeferMark); when it does not go in, InTx rolls
// back and runs fn once more, marker first. A transaction without such a
// marker runs fn once.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrapErr("begin", err)
	}
	// A connection released inside a transaction (a failed rollback) is
	// closed by the pool, never reused.
	defer c.Release()
	return pgxtx.Run(ctx, c.Conn(), pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, fn)
}

// Mark implements idem.TxStore: it writes a completed marker for req.Key
// inside tx with INSERT .. ON CONFLICT, which never raises a unique
// violation (that would abort the caller's transaction).
//
// A new key costs one INSERT .. ON CONFLICT DO NOTHING that returns no
// row (the claim is built from the request) and nothing else.
// When the key exists, Mark runs the claim statement (see the package doc)
// to take over an expired or released record or to read the existing one:
// a second round trip on the path of duplicates, which skip their business
// writes anyway.
//
// When another open transaction has just written the same key, Mark waits
// for it: if it commits, Mark reports ClaimDuplicate (the caller skips its
// business writes); if it rolls back, Mark writes the marker. Either way the
// business writes of exactly one transaction commit.
func (s *Store) Mark(ctx context.Context, tx pgx.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	n, err := prepare(req)
	if err != nil {
		return idem.Claim{}, err
	}
	tag, err := tx.Exec(ctx, s.sql.markNew, recordArgs(n)...)
	switch {
	case err != nil:
		return idem.Claim{}, wrapErr("mark", err)
	case tag.RowsAffected() == 1:
		// The row just inserted is the fresh record the request describes:
		// build it here rather than read it back (RETURNING the record
		// cost the server about 12 µs of a 50 µs marker, see BENCH.md).
		c, _ := storekit.ApplyMark(nil, n)
		return c, nil
	}
	return s.claimOne(ctx, tx, s.sql.mark, n, true)
}

// MarkBatch is Mark for many keys in one statement (two when some keys
// exist already: the insert settles the new ones first), for consumers that
// commit a whole poll (a Kafka batch) in one transaction: the markers of
// every key commit with the batch's business writes. Results are in request
// order; keys must be distinct (ErrDuplicateKeyInBatch). Process the
// messages whose claim is idem.ClaimAcquired and skip the duplicates
// (idem.ClaimDuplicate); a key held by a live two-phase owner
// (idem.ClaimInProgress, idem.ClaimStale) is not done: do not commit its
// offset. To detect a key reused with other content, compare each
// duplicate's Record.Fingerprint with the request's, as idem.MarkTx does.
func (s *Store) MarkBatch(ctx context.Context, tx pgx.Tx, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	return s.batch(ctx, tx, reqs, true)
}

// ErrRerun is wrapped by the error a handler's first statement returns when
// Options.MarkWithFirstStatement is set and the marker sent with it found
// its key recorded (or failed): the transaction is rolled back and idem.DoTx
// runs it again, marker first. Return the error; a handler that logs its
// failures may want to leave this one out.
var ErrRerun = pgxtx.ErrRerun

// DeferMark implements storekit.MarkDeferrer: with
// Options.MarkWithFirstStatement, it queues the marker of a new key (the
// INSERT .. ON CONFLICT DO NOTHING that Mark runs first) on a transaction
// of InTx that has not begun, to go out with its first statement.
//
// After a queued marker finds its key recorded, the store's next
// firstPause transactions send the marker first instead: redeliveries come
// in runs (a consumer restarting from an old offset, a queue redelivering
// after an outage), and a deferred marker makes each of them cost a wasted
// batch and a rollback.
func (s *Store) DeferMark(ctx context.Context, tx pgx.Tx, req idem.ClaimRequest) (idem.Claim, bool, error) {
	if !s.opts.MarkWithFirstStatement || s.firstPaused.Active() {
		return idem.Claim{}, false, nil
	}
	n, err := prepare(req)
	if err != nil {
		return idem.Claim{}, false, err
	}
	if !pgxtx.Defer(tx, s.pauseFirst, s.sql.markNew, recordArgs(n)...) {
		return idem.Claim{}, false, nil
	}
	c, _ := storekit.ApplyMark(nil, n)
	return c, true, nil
}

// firstPause is how many DoTx transactions of a Store send the marker first
// after a deferred one missed (see DeferMark).
const firstPause = 64

// pauseFirst is called when a deferred marker missed. The rerun of that
// transaction, which always follows, takes one of the count.
func (s *Store) pauseFirst() { s.firstPaused.Start(s.firstPause + 1) }

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
