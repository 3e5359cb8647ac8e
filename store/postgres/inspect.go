package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
)

// List implements idem.Inspector: records in (scope, id) order, paged with
// ListFilter.After through the primary key. Filters other than Scope and
// After are applied to the rows the key order visits, so on a huge table
// prefer a Scope (and page through it) to a table-wide state filter.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Scope != "" {
		where = append(where, "scope = "+arg(f.Scope))
	}
	if f.State != "" {
		code, ok := stateCode(f.State)
		if !ok {
			return nil, fmt.Errorf("%w: unknown state %q in ListFilter", idem.ErrInvalidOptions, f.State)
		}
		where = append(where, "state = "+arg(code))
	}
	if !f.StaleAt.IsZero() {
		where = append(where, fmt.Sprintf("state = %d AND lease_until <= %s", stInProgress, arg(micro(f.StaleAt))))
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(micro(f.CreatedBefore)))
	}
	switch {
	case f.After.IsZero():
	case f.Scope != "" && f.After.Scope() == f.Scope:
		// Within one scope, id > $n lets the primary key start at the
		// page instead of at the scope's first key (a deep page of a big
		// scope would otherwise walk every key before it).
		where = append(where, "id > "+arg(f.After.StoredID()))
	case f.Scope != "" && f.After.Scope() > f.Scope:
		return nil, nil // past the scope's last key
	case f.Scope != "":
		// After lies before the scope: the whole scope follows it.
	default:
		a, b := arg(f.After.Scope()), arg(f.After.StoredID())
		where = append(where, fmt.Sprintf("(scope, id) > (%s, %s)", a, b))
	}
	limit := f.PageLimit()
	q := s.sql.list
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	// scope and id are COLLATE "C" columns: this is the primary key's order
	// and the bytewise (scope, stored id) order of the contract.
	q += ` ORDER BY scope, id LIMIT ` + arg(limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrapErr("list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idem.Record, error) {
		var rr rowRecord
		err := row.Scan(rr.dest()...)
		return rr.record(), err
	})
	if err != nil {
		return nil, wrapErr("list", err)
	}
	return out, nil
}

// Stats implements idem.Inspector. It reads the whole table (one sequential
// scan): cheap for operators now and then, not for a dashboard polling a
// 100M-row table every second.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	rows, err := s.pool.Query(ctx, s.sql.stats, micro(now))
	if err != nil {
		return nil, wrapErr("stats", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idem.ScopeStats, error) {
		var (
			st     idem.ScopeStats
			oldest *time.Time
		)
		err := row.Scan(&st.Scope, &st.InProgress, &st.Completed, &st.Released, &st.Stale, &st.Expired, &oldest)
		if oldest != nil {
			st.OldestInProgress = *oldest
		}
		return st, err
	})
	if err != nil {
		return nil, wrapErr("stats", err)
	}
	return out, nil
}
