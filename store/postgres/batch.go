package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
)

// ErrDuplicateKeyInBatch means one batch named a key twice. PostgreSQL cannot
// upsert one row twice in a statement, and the idem.BatchStore contract asks
// for distinct keys.
var ErrDuplicateKeyInBatch = errors.New("postgres: key repeated in one batch")

// ClaimBatch implements idem.BatchStore: every key in one statement (arrays
// unnested into one statement). Results are in request order; keys must be
// distinct (ErrDuplicateKeyInBatch).
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	return s.batch(ctx, s.pool, s.sql.claimBatchNew, s.sql.claimBatch, reqs, false)
}

type rkey struct{ scope, id string }

// batch claims or marks reqs with query, running first instead (when set)
// for the first attempt: a statement that settles some keys cheaply and
// leaves the others to query.
func (s *Store) batch(ctx context.Context, q querier, first, query string, reqs []idem.ClaimRequest, mark bool) ([]idem.Claim, error) {
	op := "claim batch"
	if mark {
		op = "mark batch"
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	index := make(map[rkey]int, len(reqs))
	norm := make([]idem.ClaimRequest, len(reqs))
	for i, r := range reqs {
		if err := r.Key.Validate(); err != nil {
			return nil, fmt.Errorf("%w (batch item %d)", err, i)
		}
		k := rkey{r.Key.Scope, r.Key.StoredID()}
		if _, dup := index[k]; dup {
			return nil, fmt.Errorf("%w: %s", ErrDuplicateKeyInBatch, r.Key)
		}
		index[k] = i
		norm[i] = normalize(r)
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
		stmt := query
		if attempt == 0 && first != "" {
			stmt = first
		}
		again, err := s.batchOnce(ctx, q, stmt, norm, pending, index, mark, out)
		switch {
		case standalone && retryable(err):
			continue // the statement rolled back as a whole: every key again
		case err != nil:
			return nil, wrapErr(op, err)
		}
		pending = again
	}
	return out, nil
}

// batchOnce runs the statement for the requests at pending, fills out and
// returns the requests to run again (rows committed after the snapshot).
func (s *Store) batchOnce(ctx context.Context, q querier, query string, reqs []idem.ClaimRequest, pending []int,
	index map[rkey]int, mark bool, out []idem.Claim) ([]int, error) {
	n := len(pending)
	var (
		scopes, ids, displays, fps = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nows, leases, exps, sweeps = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		takeOver                   = make([]bool, n)
	)
	for j, i := range pending {
		r := reqs[i]
		scopes[j], ids[j], displays[j], fps[j] = r.Key.Scope, r.Key.StoredID(), displayArg(r.Key), r.Fingerprint
		nows[j], leases[j], exps[j], sweeps[j] = r.Now, r.LeaseUntil, r.ExpiresAt, sweepAt(r.ExpiresAt)
		takeOver[j] = r.TakeOverStale
	}
	rows, err := q.Query(ctx, query, scopes, ids, displays, fps, nows, leases, exps, sweeps, takeOver)
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
