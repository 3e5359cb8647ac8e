package postgres

import (
	"context"
	"errors"
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
	// A key marked in a transaction that then does not commit is not
	// recorded: the store forgets it marked it (see recentKeys), so that
	// its retry is not taken for a redelivery.
	return pgxtx.RunNoting(ctx, c.Conn(), pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, fn, s.forget)
}

// Mark implements idem.TxStore: it writes a completed marker for req.Key
// inside tx with INSERT .. ON CONFLICT, which never raises a unique
// violation (that would abort the caller's transaction).
//
// A new key costs one INSERT .. ON CONFLICT DO NOTHING that returns no
// row (the claim is built from the request) and nothing else.
// When the key exists, Mark reads its record (a second round trip on the
// path of duplicates, which skip their business writes anyway) and decides
// by the record rules: a duplicate, a conflict or a live owner costs that
// read and nothing else; only a record the marker may take over (expired or
// released) costs the claim statement (see the package doc) on top.
//
// A key guessed recorded (see guess.go) goes otherwise. In a transaction of
// InTx that has not begun, a key the store marked lately, or any key while
// most of the store's other markers have met recorded keys, is read first,
// outside the transaction: a duplicate then costs that one round trip and
// no transaction at all, and a key found unrecorded or expired is marked by
// the claim statement, which begins the transaction. A key guessed recorded
// otherwise (recorded keys common, but not most), or in a transaction
// already begun, goes as one statement that inserts or, inserting nothing,
// reads the record, so that its duplicate costs one round trip.
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
	if m, ok := pgxtx.Missed(tx).(missedMark); ok && m.key == n.Key {
		// This transaction's first run deferred the marker of this key
		// (DeferMark), which inserted nothing.
		return s.markExisting(ctx, tx, n, false)
	}
	recent := s.recent.has(n.Key)
	if (recent || s.redeliveries.mostly()) && pgxtx.Outside(tx) != nil {
		// Most likely a redelivery, and InTx's transaction has not begun:
		// markExisting reads the record before it does.
		return s.markExisting(ctx, tx, n, !recent)
	}
	if recent || !s.redeliveries.rare() {
		return s.markOrRead(ctx, tx, n, !recent)
	}
	tag, err := tx.Exec(ctx, s.sql.markNew, recordArgs(n)...)
	switch {
	case err != nil:
		return idem.Claim{}, wrapErr("mark", err)
	case tag.RowsAffected() == 1:
		s.redeliveries.observe(false)
		return s.marked(tx, n), nil
	}
	s.redeliveries.observe(true)
	return s.markExisting(ctx, tx, n, false)
}

// marked returns the claim of a marker that inserted n's key in tx and
// notes the key as recent (and on tx, so that InTx forgets it should tx not
// commit). The row just inserted is the fresh record the request
// describes: it is built here rather than read back (RETURNING the record
// cost the server about 12 µs of a 50 µs marker, see BENCH.md).
func (s *Store) marked(tx pgx.Tx, n idem.ClaimRequest) idem.Claim {
	pgxtx.Note(tx, s.recent.add(n.Key))
	c, _ := storekit.ApplyMark(nil, n)
	return c
}

// markOrRead marks n's key with markNewOrGet, the insert and, when it
// inserts nothing, the read of the record in one statement: for a key that
// is most likely recorded (see recentKeys and redeliveries), whose marker
// then costs one round trip instead of two. observe counts its outcome in
// the estimate of redeliveries.
func (s *Store) markOrRead(ctx context.Context, tx pgx.Tx, n idem.ClaimRequest, observe bool) (idem.Claim, error) {
	rows, err := tx.Query(ctx, s.sql.markNewOrGet, recordArgs(n)...)
	if err != nil {
		return idem.Claim{}, wrapErr("mark", err)
	}
	var (
		inserted = true
		found    bool
		rr       rowRecord
	)
	if rows.Next() {
		inserted = false
		// A row of NULLs: the conflicting row is not in the statement's
		// snapshot (committed after it, or deleted since).
		if found = rows.RawValues()[0] != nil; found {
			err = rows.Scan(rr.dest()...)
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return idem.Claim{}, wrapErr("mark", err)
	}
	if observe {
		s.redeliveries.observe(!inserted)
	}
	if inserted {
		return s.marked(tx, n), nil
	}
	if found {
		if c, ok := resolve(false, rr.record(), false, n, true); ok {
			return c, nil
		}
	}
	return s.claimOne(ctx, tx, s.sql.mark, n, true)
}

// markExisting marks n's key, which is most likely recorded (its insert
// found it, or the store marked it lately): it reads the record and applies
// the record rules to it (storekit.ApplyMark), which settle a duplicate, a
// conflict or a live owner without a write or a lock; the read is what the
// claim statement's third branch would return, from the same kind of
// snapshot, for a third of its server time (BENCH.md). A record the marker
// may take over (expired, released), or no record (deleted since, or its
// transaction rolled back), goes through the claim statement in tx, which
// writes it.
//
// When tx is InTx's and has not begun (pgxtx.Outside), the read runs on its
// connection before the BEGIN: a committed record that settles the marker
// settles it in any transaction, so a redelivery then costs that one round
// trip, and the transaction, never begun, none (a rollback of nothing).
// observe counts whether the read found a record in the estimate of
// redeliveries.
func (s *Store) markExisting(ctx context.Context, tx pgx.Tx, n idem.ClaimRequest, observe bool) (idem.Claim, error) {
	var q querier = tx
	if conn := pgxtx.Outside(tx); conn != nil {
		q = conn
	}
	var rr rowRecord
	err := q.QueryRow(ctx, s.sql.get, n.Key.Scope, n.Key.StoredID()).Scan(rr.dest()...)
	if observe && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		s.redeliveries.observe(err == nil)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return idem.Claim{}, wrapErr("mark", err)
	default:
		if c, ok := resolve(false, rr.record(), false, n, true); ok {
			return c, nil
		}
	}
	return s.claimOne(ctx, tx, s.sql.mark, n, true)
}

// missedMark is what a deferred marker that inserted nothing leaves to the
// rerun of its transaction (pgxtx.Missed): its key is recorded.
type missedMark struct{ key idem.Key }

// settleDeferred is the pgxtx.Deferred.Settle of the deferred marker of
// key (markNew).
func (s *Store) settleDeferred(tx pgx.Tx, key idem.Key) func(rows pgx.Rows) (bool, any, error) {
	return func(rows pgx.Rows) (bool, any, error) {
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, nil, err
		}
		inserted := rows.CommandTag().RowsAffected() == 1
		s.redeliveries.observe(!inserted)
		if !inserted {
			return false, missedMark{key: key}, nil
		}
		pgxtx.Note(tx, s.recent.add(key))
		return true, nil, nil
	}
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
// Options.MarkWithFirstStatement, it queues the marker of a key that is
// most likely new (the INSERT .. ON CONFLICT DO NOTHING that Mark runs
// first) on a transaction of InTx that has not begun, to go out with its
// first statement.
//
// A deferred marker that finds its key recorded costs the transaction a
// wasted batch, its rollback and a rerun, and runs the handler's first
// statement for nothing. So a key the store marked lately (recentKeys) is
// not deferred: Mark reads its record first, before the transaction begins,
// and the redelivery costs that one round trip without the handler ever
// starting. Nor is any key while more than a quarter of the
// store's recent markers of other keys met recorded ones (redeliveries): a
// consumer restarting from an old offset, a queue redelivering after an
// outage.
func (s *Store) DeferMark(ctx context.Context, tx pgx.Tx, req idem.ClaimRequest) (idem.Claim, bool, error) {
	if !s.opts.MarkWithFirstStatement || !s.deferAll && (!s.redeliveries.rare() || s.recent.has(req.Key)) {
		return idem.Claim{}, false, nil
	}
	n, err := prepare(req)
	if err != nil {
		return idem.Claim{}, false, err
	}
	if !pgxtx.Defer(tx, pgxtx.Deferred{SQL: s.sql.markNew, Args: recordArgs(n), Settle: s.settleDeferred(tx, n.Key)}) {
		return idem.Claim{}, false, nil
	}
	c, _ := storekit.ApplyMark(nil, n)
	return c, true, nil
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
