package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// ErrDuplicateKeyInBatch is idem.ErrDuplicateKeyInBatch: one batch named a
// key twice (PostgreSQL cannot upsert one row twice in a statement, and the
// storekit.BatchStore contract asks for distinct keys). The batch is refused
// whole with an *idem.InvalidDataError, permanent like on every store.
//
// Deprecated: use idem.ErrDuplicateKeyInBatch; this is the same value.
var ErrDuplicateKeyInBatch = idem.ErrDuplicateKeyInBatch

// ClaimBatch implements storekit.BatchStore: every key in one statement (arrays
// unnested into one statement). Results are in request order; keys must be
// distinct (ErrDuplicateKeyInBatch).
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	return s.batch(ctx, s.pool, reqs, false)
}

type rkey struct{ scope, id string }

// batch claims (or with mark, marks) reqs. The first attempt is the
// insert-only statement, which settles new keys cheaply; the keys it leaves
// go through the full statement.
func (s *Store) batch(ctx context.Context, q querier, reqs []idem.ClaimRequest, mark bool) ([]idem.Claim, error) {
	op, query := "claim batch", s.sql.claimBatch
	if mark {
		op, query = "mark batch", s.sql.markBatch
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := storekit.CheckBatchKeys(op, reqs); err != nil {
		return nil, err
	}
	index := make(map[rkey]int, len(reqs))
	norm := make([]idem.ClaimRequest, len(reqs))
	for i, r := range reqs {
		// Every request is prepared on its own (its own NewToken, its
		// fingerprint as stored) before any statement: the fast paths
		// below write these values, never the caller's.
		n, err := prepare(r)
		if err != nil {
			return nil, err
		}
		index[rkey{n.Key.Scope, n.Key.StoredID()}] = i
		norm[i] = n
		if mark {
			norm[i].TakeOverStale = false
		}
	}
	out := make([]idem.Claim, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	_, standalone := q.(*pgxpool.Pool)
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxAttempts {
			return nil, fmt.Errorf("postgres: %s: %d records kept changing under %d attempts", op, len(pending), maxAttempts)
		}
		var (
			again []int
			err   error
		)
		if attempt == 0 {
			// Both insert-only statements take the same arguments.
			shared := sharesScopeAndTimes(norm)
			args := insertArgs(norm, shared)
			plain := false
			if standalone && !mark && !s.plainPaused.Active() {
				plain, err = s.batchPlain(ctx, q, norm, shared, args, out)
				if isUniqueViolation(err) {
					s.plainPaused.Start(plainPause)
					plain, err = false, nil
				}
			}
			if !plain && err == nil {
				again, err = s.batchNew(ctx, q, norm, shared, args, index, mark, out)
			}
		} else {
			again, err = s.batchOnce(ctx, q, query, norm, pending, index, mark, out)
		}
		if standalone && isSerializationFailure(err) {
			s.batchInRC.Store(true)
		}
		switch {
		case standalone && retryable(err):
			// The statement rolled back as a whole: its keys again (all
			// of them, or those batchOnce names).
			if again != nil {
				pending = again
			}
			continue
		case err != nil:
			return nil, wrapErr(op, err)
		}
		pending = again
	}
	return out, nil
}

// batchNew runs the insert-only statement for every request, with args
// from insertArgs. It returns the
// keys of the rows it inserted; their claims are the fresh records the
// requests describe (storekit.ApplyClaim on an absent record), built here rather
// than read back. It returns the requests whose keys exist already.
//
// A batch whose requests share their scope and times (a poll claimed at one
// instant) sends those once, as scalars, and gets back ids alone.
func (s *Store) batchNew(ctx context.Context, q querier, reqs []idem.ClaimRequest, shared bool, args []any,
	index map[rkey]int, mark bool, out []idem.Claim) ([]int, error) {
	var query string
	switch {
	case mark && shared:
		query = s.sql.markBatchNewShared
	case mark:
		query = s.sql.markBatchNew
	case shared:
		query = s.sql.claimBatchNewShared
	default:
		query = s.sql.claimBatchNew
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	apply := storekit.ApplyClaim
	if mark {
		apply = storekit.ApplyMark
	}
	done := make([]bool, len(reqs))
	k := rkey{scope: reqs[0].Key.Scope}
	dest := []any{&k.scope, &k.id}
	if shared {
		dest = dest[1:]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		i, ok := index[k]
		if !ok {
			return nil, fmt.Errorf("statement returned a key not in the batch: %s/%s", k.scope, k.id)
		}
		out[i], _ = apply(nil, reqs[i])
		done[i] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var again []int
	for i, d := range done {
		if !d {
			again = append(again, i)
		}
	}
	return again, nil
}

// batchPlain claims every request of a ClaimBatch with one plain INSERT, no
// ON CONFLICT and no RETURNING: the cheapest statement for a poll of new
// keys. It reports whether it inserted them all. Any key that exists fails
// the whole statement with a unique violation (SQLSTATE 23505), which rolls
// back this statement only, since it runs on its own; the caller then takes
// the ON CONFLICT path. Only for statements outside a caller's transaction.
// args are insertArgs's.
func (s *Store) batchPlain(ctx context.Context, q querier, reqs []idem.ClaimRequest, shared bool, args []any,
	out []idem.Claim) (bool, error) {
	query := s.sql.claimBatchPlain
	if shared {
		query = s.sql.claimBatchPlainShared
	}
	tag, err := q.Exec(ctx, query, args...)
	if err != nil {
		return false, err
	}
	if n := tag.RowsAffected(); n != int64(len(reqs)) {
		return false, fmt.Errorf("plain batch insert wrote %d rows for %d keys", n, len(reqs))
	}
	for i := range reqs {
		out[i], _ = storekit.ApplyClaim(nil, reqs[i])
	}
	return true, nil
}

// isSerializationFailure reports SQLSTATE 40001.
func isSerializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

// isUniqueViolation reports a statement that failed on an existing key.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// plainPause is how many of a Store's batches skip the plain insert after
// one failed on an existing key (a redelivered poll, a producer retry):
// they go straight to ON CONFLICT, so a stream of duplicates costs a wasted
// statement (and a line in the server's error log) once per plainPause
// batches at most, not every time.
const plainPause = 32

// insertArgs are the arguments of the insert-only statements: with shared,
// the scope, ids, fingerprints, the four times and the new tokens of the
// shared form (claimBatchNewShared); otherwise batchArgs's arrays.
func insertArgs(reqs []idem.ClaimRequest, shared bool) []any {
	if !shared {
		return batchArgs(reqs, nil)
	}
	ids, fps, tokens := make([]string, len(reqs)), make([]string, len(reqs)), make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i], fps[i], tokens[i] = r.Key.StoredID(), r.Fingerprint, r.NewToken
	}
	r := reqs[0]
	return []any{r.Key.Scope, ids, fps, r.Now, r.LeaseUntil, r.ExpiresAt, sweepAt(r.ExpiresAt), tokens}
}

// sharesScopeAndTimes reports whether every request has the first one's
// scope, clock reading, lease and retention, and none has a display id
// (an id long enough to be stored hashed).
func sharesScopeAndTimes(reqs []idem.ClaimRequest) bool {
	f := reqs[0]
	for _, r := range reqs {
		if r.Key.Scope != f.Key.Scope || !r.Now.Equal(f.Now) || !r.LeaseUntil.Equal(f.LeaseUntil) ||
			!r.ExpiresAt.Equal(f.ExpiresAt) || displayArg(r.Key) != "" {
			return false
		}
	}
	return true
}

// batchArgs are the statement's unnested arrays for the requests at
// pending (all of them when pending is nil).
func batchArgs(reqs []idem.ClaimRequest, pending []int) []any {
	if pending == nil {
		pending = make([]int, len(reqs))
		for i := range pending {
			pending[i] = i
		}
	}
	n := len(pending)
	var (
		scopes, ids, displays, fps = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nows, leases, exps, sweeps = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		takeOver                   = make([]bool, n)
		tokens                     = make([]int64, n)
	)
	for j, i := range pending {
		r := reqs[i]
		scopes[j], ids[j], displays[j], fps[j] = r.Key.Scope, r.Key.StoredID(), displayArg(r.Key), r.Fingerprint
		nows[j], leases[j], exps[j], sweeps[j] = r.Now, r.LeaseUntil, r.ExpiresAt, sweepAt(r.ExpiresAt)
		takeOver[j], tokens[j] = r.TakeOverStale, r.NewToken
	}
	return []any{scopes, ids, displays, fps, nows, leases, exps, sweeps, takeOver, tokens}
}

// batchOnce runs the statement for the requests at pending, fills out and
// returns the requests to run again (rows committed after the snapshot, and
// on an error the requests whose statement did not commit).
// The statement takes one take_over for all its keys, so the requests go in
// up to two statements, one per value; each runs in key order, and outside
// a caller's transaction each commits before the next starts, so neither
// holds locks while waiting for the other's.
func (s *Store) batchOnce(ctx context.Context, q querier, query string, reqs []idem.ClaimRequest, pending []int,
	index map[rkey]int, mark bool, out []idem.Claim) ([]int, error) {
	var byTakeOver [2][]int
	for _, i := range pending {
		if reqs[i].TakeOverStale {
			byTakeOver[1] = append(byTakeOver[1], i)
		} else {
			byTakeOver[0] = append(byTakeOver[0], i)
		}
	}
	var again []int
	for v, group := range byTakeOver {
		if len(group) == 0 {
			continue
		}
		a, err := s.batchGroup(ctx, q, query, reqs, group, v == 1, index, mark, out)
		if err != nil {
			// An earlier group's claims are committed: only this group and
			// the later one are left to run again.
			for _, rest := range byTakeOver[v:] {
				again = append(again, rest...)
			}
			return again, err
		}
		again = append(again, a...)
	}
	return again, nil
}

// batchGroup runs the statement for the requests at pending, which share
// takeOver. On a server whose default isolation is REPEATABLE READ the
// upsert fails (SQLSTATE 40001) whenever a row of the batch changed after
// the statement's snapshot, which under contention is nearly always: after
// the first such failure a Store runs its standalone upserts in READ
// COMMITTED transactions of their own (two more round trips each), where
// the upsert waits for and then sees the latest row.
func (s *Store) batchGroup(ctx context.Context, q querier, query string, reqs []idem.ClaimRequest, pending []int,
	takeOver bool, index map[rkey]int, mark bool, out []idem.Claim) ([]int, error) {
	args := batchArgs(reqs, pending)
	args[8] = takeOver // the statement's one take_over, in place of the array
	if pool, ok := q.(*pgxpool.Pool); ok && s.batchInRC.Load() {
		var again []int
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			var err error
			again, err = s.readGroup(ctx, tx, query, args, reqs, pending, index, mark, out)
			return err
		})
		return again, err
	}
	return s.readGroup(ctx, q, query, args, reqs, pending, index, mark, out)
}

// readGroup runs batchGroup's statement with args and reads its rows.
func (s *Store) readGroup(ctx context.Context, q querier, query string, args []any, reqs []idem.ClaimRequest, pending []int,
	index map[rkey]int, mark bool, out []idem.Claim) ([]int, error) {
	n := len(pending)
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := make(map[int]bool, n)
	var (
		acquired bool
		rr       rowRecord
	)
	dest := append([]any{&acquired}, rr.dest()...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		i, ok := index[rkey{rr.scope, rr.id}]
		if !ok {
			return nil, fmt.Errorf("statement returned a key not in the batch: %s/%s", rr.scope, rr.id)
		}
		if c, ok := resolve(acquired, rr.record(), rr.retaken, reqs[i], mark); ok {
			out[i], done[i] = c, true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var again []int
	for _, i := range pending {
		if !done[i] {
			again = append(again, i)
		}
	}
	return again, nil
}
