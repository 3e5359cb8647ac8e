package postgres

import (
	"context"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.ActivityCounter = (*Store)(nil)

// activitySQL groups the records of the window [$1, $2) by scope and
// bucket of $3 milliseconds: by created_at ("created"), and by updated_at
// under the state and whether the key was claimed more than once.
func (s *Store) activitySQL(scoped bool) string {
	scope := ""
	if scoped {
		scope = " AND scope = $4"
	}
	bucket := func(col string) string {
		return `floor(extract(epoch FROM (` + col + ` - $1::timestamptz)) * 1000 / $3)::bigint`
	}
	t := s.names.table
	return `SELECT scope, 0, ` + bucket("created_at") + `, false, count(*) FROM ` + t + `
	WHERE created_at >= $1 AND created_at < $2` + scope + ` GROUP BY 1, 3
UNION ALL
SELECT scope, state, ` + bucket("updated_at") + `, attempts > 1, count(*) FROM ` + t + `
	WHERE updated_at >= $1 AND updated_at < $2` + scope + ` GROUP BY 1, 2, 3, 4`
}

// Activity implements idem.ActivityCounter with one grouped scan of the
// table (created_at and updated_at are not indexed: the console counts now
// and then, in the background).
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	args := []any{micro(q.From), micro(q.To()), q.Step.Milliseconds()}
	if q.Scope != "" {
		args = append(args, q.Scope)
	}
	rows, err := s.pool.Query(ctx, s.activitySQL(q.Scope != ""), args...)
	if err != nil {
		return nil, wrapErr("activity", err)
	}
	defer rows.Close()
	t := storekit.NewActivityTally(q)
	for rows.Next() {
		var (
			scope     string
			code      int16
			bucket, n int64
			retried   bool
		)
		if err := rows.Scan(&scope, &code, &bucket, &retried, &n); err != nil {
			return nil, wrapErr("activity", err)
		}
		state := storekit.ByCreation
		if code != 0 {
			state = stateName(code)
		}
		t.Add(scope, state, int(bucket), retried, n)
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("activity", err)
	}
	return t.Result(), nil
}
