package sqlrecord

import (
	"context"
	"database/sql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// ActivitySQL is the grouped scan of idem.ActivityCounter over table, for
// a database whose integer division is div ("/" in SQLite, "DIV" in
// MySQL): one row (scope, state, bucket, retried, count) per group, state
// "created" for the counts by created_at. Its arguments come from
// ActivityArgs; with scoped, it takes the scope too.
func ActivitySQL(table, div string, scoped bool) string {
	scope := ""
	if scoped {
		scope = " AND scope = ?"
	}
	return `SELECT scope, '` + string(storekit.ByCreation) + `', (created_at - ?) ` + div + ` ?, 0, COUNT(*) FROM ` + table + `
	WHERE created_at >= ? AND created_at < ?` + scope + ` GROUP BY scope, (created_at - ?) ` + div + ` ?
UNION ALL
SELECT scope, state, (updated_at - ?) ` + div + ` ?, attempts > 1, COUNT(*) FROM ` + table + `
	WHERE updated_at >= ? AND updated_at < ?` + scope + ` GROUP BY scope, state, (updated_at - ?) ` + div + ` ?, attempts > 1`
}

// ActivityArgs are the arguments of ActivitySQL for the prepared query q.
func ActivityArgs(q idem.ActivityQuery) []any {
	from, step, to := MS(q.From), q.Step.Milliseconds(), MS(q.To())
	var args []any
	for range 2 {
		args = append(args, from, step, from, to)
		if q.Scope != "" {
			args = append(args, q.Scope)
		}
		args = append(args, from, step)
	}
	return args
}

// Activity runs ActivitySQL on db and tallies its rows.
func Activity(ctx context.Context, db *sql.DB, table, div string, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, ActivitySQL(table, div, q.Scope != ""), ActivityArgs(q)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	t := storekit.NewActivityTally(q)
	for rows.Next() {
		var (
			scope, state string
			bucket, n    int64
			retried      bool
		)
		if err := rows.Scan(&scope, &state, &bucket, &retried, &n); err != nil {
			return nil, err
		}
		t.Add(scope, idem.State(state), int(bucket), retried, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return t.Result(), nil
}
