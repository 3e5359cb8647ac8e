package mysql

import (
	"context"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// List implements idem.Inspector: records in (scope, id) byte order, paged
// by keyset after f.After. Filters other than Scope and After scan; List is
// an operator's tool, not a hot path.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	limit := f.PageLimit()
	conds, args := sqlrecord.ListConds(f)
	if !f.After.IsZero() {
		conds = append(conds, "(scope > ? OR (scope = ? AND id > ?))")
		args = append(args, f.After.Scope(), f.After.Scope(), f.After.StoredID())
	}
	q := "SELECT " + sqlrecord.Columns + " FROM " + s.table
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY scope, id LIMIT ?"
	rows, err := s.db.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlrecord.ScanAll(rows)
}

// Stats implements idem.Inspector with one grouped scan of the table.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	t := sqlrecord.MS(now)
	rows, err := s.db.QueryContext(ctx, `SELECT scope,
		COALESCE(SUM(state = 'in_progress'), 0), COALESCE(SUM(state = 'completed'), 0), COALESCE(SUM(state = 'released'), 0),
		COALESCE(SUM(state = 'in_progress' AND lease_until <= ?), 0),
		COALESCE(SUM(`+expired+`), 0),
		MIN(CASE WHEN state = 'in_progress' THEN created_at END)
		FROM `+s.table+` GROUP BY scope ORDER BY scope`, t, t)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlrecord.ScanStats(rows)
}
