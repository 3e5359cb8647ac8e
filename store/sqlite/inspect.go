package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// List implements idem.Inspector. Pages follow the primary key (scope, id),
// so each page is an index range scan however large the table.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var (
		where []string
		args  []any
	)
	if f.Scope != "" {
		where, args = append(where, "scope = ?"), append(args, f.Scope)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, string(f.State))
	}
	if !f.StaleAt.IsZero() {
		where, args = append(where, "state = 'in_progress' AND lease_until <= ?"), append(args, ms(f.StaleAt))
	}
	if !f.CreatedBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, ms(f.CreatedBefore))
	}
	if f.After != (idem.Key{}) {
		where, args = append(where, "(scope, id) > (?, ?)"), append(args, f.After.Scope, f.After.StoredID())
	}
	q := s.q.list0
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY scope, id LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	defer rows.Close()
	var out []idem.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	return out, nil
}

// Stats implements idem.Inspector. It scans the whole table: an operator's
// command, not something to run per message.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	rows, err := s.db.QueryContext(ctx, s.q.stats, ms(now))
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer rows.Close()
	var out []idem.ScopeStats
	for rows.Next() {
		var (
			st     idem.ScopeStats
			oldest sql.NullInt64
		)
		if err := rows.Scan(&st.Scope, &st.InProgress, &st.Completed, &st.Released, &st.Stale, &st.Expired, &oldest); err != nil {
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		if oldest.Valid {
			st.OldestInProgress = fromMS(oldest.Int64)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	return out, nil
}
