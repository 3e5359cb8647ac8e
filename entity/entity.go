package entity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Dialect selects the SQL spelling of conflict-free inserts and placeholders.
type Dialect int

// Dialects.
const (
	Postgres Dialect = iota + 1
	SQLite
	MySQL
)

// ErrInvalidIdentifier reports a table or column name that is not a plain
// SQL identifier.
var ErrInvalidIdentifier = errors.New("entity: invalid identifier")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func checkIdent(kind, name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%w: %s %q (letters, digits and _, not starting with a digit, at most 63)", ErrInvalidIdentifier, kind, name)
	}
	return nil
}

// Querier runs statements inside the caller's transaction. SQL adapts
// *sql.Tx (and *sql.DB, *sql.Conn); package entity/entitypgx adapts pgx.Tx.
type Querier interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query returning at most one row and scans it into dest;
	// it returns sql.ErrNoRows when there is none.
	QueryRow(ctx context.Context, query string, dest []any, args ...any) error
}

type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL adapts a database/sql transaction (or DB, or Conn) to Querier.
func SQL(q sqlQuerier) Querier { return sqlAdapter{q} }

type sqlAdapter struct{ q sqlQuerier }

func (a sqlAdapter) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := a.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (a sqlAdapter) QueryRow(ctx context.Context, query string, dest []any, args ...any) error {
	return a.q.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (d Dialect) quote(name string) string {
	if d == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

func (d Dialect) placeholder(i int) string {
	if d == Postgres {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

func (d Dialect) valid() error {
	if d < Postgres || d > MySQL {
		return fmt.Errorf("entity: unknown dialect %d", d)
	}
	return nil
}

func (d Dialect) placeholders(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = d.placeholder(i + 1)
	}
	return strings.Join(ps, ", ")
}

func (d Dialect) columns(cols []string) string {
	qs := make([]string, len(cols))
	for i, c := range cols {
		qs[i] = d.quote(c)
	}
	return strings.Join(qs, ", ")
}
