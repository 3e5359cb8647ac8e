package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem"
)

// Sweep implements idem.Store: one DELETE of at most req.Limit records whose
// retention ended, guarded by pg_try_advisory_xact_lock so that one instance
// sweeps a table at a time (the others get 0 at once, without waiting).
// A Limit of zero or less deletes nothing and returns (0, nil) without a
// round trip. An in-progress record whose lease is live at req.Now is never
// deleted, whatever its expires_at. Rows a claim is reviving are skipped
// (SKIP LOCKED), so a sweep never waits for claims, and a claim of an
// expired row waits at most for one batch.
//
// Rows are picked through the sweep_at index, oldest first, and checked
// against expires_at itself: sweep_at is never later than expires_at (see
// sweepAt), so a record can go as soon as it expired. Run it through
// idem.Sweeper, which repeats it until a batch comes back short.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	var err error
	for range maxAttempts {
		var tag pgconn.CommandTag
		tag, err = s.pool.Exec(ctx, s.sql.sweep, micro(req.Now), req.Limit, lockClassSweep, lockKey(s.names.qualified))
		if retryable(err) && ctx.Err() == nil {
			// Under a REPEATABLE READ default, locking a row changed
			// after the statement's snapshot fails it: run it again.
			continue
		}
		if err != nil {
			return 0, wrapErr("sweep", err)
		}
		return int(tag.RowsAffected()), nil
	}
	return 0, wrapErr("sweep", err)
}
