package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// List implements idem.Inspector. Pages follow the primary key (scope, id),
// so each page is an index range scan however large the table.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	limit := f.PageLimit()
	where, args := sqlrecord.ListConds(f)
	if !f.After.IsZero() {
		where, args = append(where, "(scope, id) > (?, ?)"), append(args, f.After.Scope(), f.After.StoredID())
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
	out, err := sqlrecord.ScanAll(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	return out, nil
}

// Stats implements idem.Inspector. It scans the whole table: an operator's
// command, not something to run per message.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	rows, err := s.db.QueryContext(ctx, s.q.stats, sqlrecord.MS(now))
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer rows.Close()
	out, err := sqlrecord.ScanStats(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	return out, nil
}
