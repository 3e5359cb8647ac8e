package mysql

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// List implements idem.Inspector: records in (scope, id) byte order, paged
// by keyset after f.After. Filters other than Scope and After scan; List is
// an operator's tool, not a hot path.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var (
		conds []string
		args  []any
	)
	if f.Scope != "" {
		conds, args = append(conds, "scope = ?"), append(args, f.Scope)
	}
	if f.State != "" {
		conds, args = append(conds, "state = ?"), append(args, string(f.State))
	}
	if !f.StaleAt.IsZero() {
		conds, args = append(conds, "state = 'in_progress' AND lease_until <= ?"), append(args, ms(f.StaleAt))
	}
	if !f.CreatedBefore.IsZero() {
		conds, args = append(conds, "created_at < ?"), append(args, ms(f.CreatedBefore))
	}
	if f.After != (idem.Key{}) {
		conds = append(conds, "(scope > ? OR (scope = ? AND id > ?))")
		args = append(args, f.After.Scope, f.After.Scope, f.After.StoredID())
	}
	q := "SELECT " + columns + " FROM " + s.table
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY scope, id LIMIT ?"
	rows, err := s.db.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []idem.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Stats implements idem.Inspector with one grouped scan of the table.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	t := ms(now)
	rows, err := s.db.QueryContext(ctx, `SELECT scope,
		COALESCE(SUM(state = 'in_progress'), 0), COALESCE(SUM(state = 'completed'), 0), COALESCE(SUM(state = 'released'), 0),
		COALESCE(SUM(state = 'in_progress' AND lease_until <= ?), 0),
		COALESCE(SUM(expires_at > 0 AND expires_at <= ?), 0),
		MIN(CASE WHEN state = 'in_progress' THEN created_at END)
		FROM `+s.table+` GROUP BY scope ORDER BY scope`, t, t)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []idem.ScopeStats
	for rows.Next() {
		var (
			st     idem.ScopeStats
			oldest sql.NullInt64
		)
		if err := rows.Scan(&st.Scope, &st.InProgress, &st.Completed, &st.Released, &st.Stale, &st.Expired, &oldest); err != nil {
			return nil, err
		}
		if oldest.Valid {
			st.OldestInProgress = fromMS(oldest.Int64)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}
