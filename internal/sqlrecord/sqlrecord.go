// Package sqlrecord is the record layout the database/sql stores
// (store/mysql, store/sqlite) share: one column list, times as integer unix
// milliseconds (NULL when unset, never 0: 0 is the epoch), and the scans of
// records and of per-scope statistics, so the two stores read and filter
// records the same way.
package sqlrecord

import (
	"database/sql"
	"time"

	"github.com/idemgo/idem"
)

// Columns in the order Scan reads them.
const Columns = "scope, id, display_id, state, fingerprint, result, token, attempts, lease_until, expires_at, created_at, updated_at"

// MS is a time as stored: integer unix milliseconds (no dependence on a
// driver's time handling or time zone, exact round trips of the caller's
// clock, a plain integer index for sweeps). Every value is a real time: 0 is
// the epoch and negative values are before it; an unset time is SQL NULL
// (NullMS), never a number.
func MS(t time.Time) int64 { return t.UnixMilli() }

// NullMS is t as a column value that may be unset: NULL for the zero time,
// MS(t) otherwise.
func NullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return MS(t)
}

// FromMS converts MS's value back to a UTC time.
func FromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// fromNullMS converts a column that may be NULL: NULL is the zero time.
func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return FromMS(v.Int64)
}

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Scan reads one record selected as Columns. A NULL display id means the
// id itself.
func Scan(sc Scanner) (idem.Record, error) {
	var (
		r                                idem.Record
		display                          sql.NullString
		state                            string
		lease, expires, created, updated sql.NullInt64
	)
	err := sc.Scan(&r.Scope, &r.ID, &display, &state, &r.Fingerprint, &r.Result,
		&r.Token, &r.Attempts, &lease, &expires, &created, &updated)
	if err != nil {
		return idem.Record{}, err
	}
	r.DisplayID = r.ID
	if display.Valid {
		r.DisplayID = display.String
	}
	r.State = idem.State(state)
	r.LeaseUntil, r.ExpiresAt = fromNullMS(lease), fromNullMS(expires)
	r.CreatedAt, r.UpdatedAt = fromNullMS(created), fromNullMS(updated)
	return r, nil
}

// ScanAll reads every record of rows (selected as Columns).
func ScanAll(rows *sql.Rows) ([]idem.Record, error) {
	var out []idem.Record
	for rows.Next() {
		r, err := Scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListConds are the WHERE conditions (joined with AND) and arguments, with
// ? placeholders, of f's filters other than After and Limit, whose form
// depends on the database.
func ListConds(f idem.ListFilter) (conds []string, args []any) {
	if f.Scope != "" {
		conds, args = append(conds, "scope = ?"), append(args, f.Scope)
	}
	if f.State != "" {
		conds, args = append(conds, "state = ?"), append(args, string(f.State))
	}
	if !f.StaleAt.IsZero() {
		conds, args = append(conds, "state = 'in_progress' AND lease_until <= ?"), append(args, MS(f.StaleAt))
	}
	if !f.CreatedBefore.IsZero() {
		conds, args = append(conds, "created_at < ?"), append(args, MS(f.CreatedBefore))
	}
	return conds, args
}

// ScanStats reads per-scope statistics selected as scope, the in-progress,
// completed, released, stale and expired counts, and the oldest in-progress
// record's created_at (NULL when there is none).
func ScanStats(rows *sql.Rows) ([]idem.ScopeStats, error) {
	var out []idem.ScopeStats
	for rows.Next() {
		var (
			st     idem.ScopeStats
			oldest sql.NullInt64
		)
		if err := rows.Scan(&st.Scope, &st.InProgress, &st.Completed, &st.Released, &st.Stale, &st.Expired, &oldest); err != nil {
			return nil, err
		}
		st.OldestInProgress = fromNullMS(oldest)
		out = append(out, st)
	}
	return out, rows.Err()
}
