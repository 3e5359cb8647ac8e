package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgo/idem"
)

// sweepIndex is the name of the records table's expiry index, which Sweep
// and Stats read.
func (s *Store) sweepIndex() string { return s.opts.Table + "_expires_at" }

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// missing returns what the migrations create and the database lacks: the
// records table ("table <name>") and its expiry index ("index <name>").
func (s *Store) missing(ctx context.Context, q queryRower) (table bool, miss []string, err error) {
	exists := func(kind, name string) (bool, error) {
		var n int
		err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = ? AND name = ?`, kind, name).Scan(&n)
		return n > 0, err
	}
	ok, err := exists("table", s.opts.Table)
	if err != nil {
		return false, nil, err
	}
	if !ok {
		return true, []string{"table " + s.opts.Table, "index " + s.sweepIndex()}, nil
	}
	if ok, err = exists("index", s.sweepIndex()); err != nil {
		return false, nil, err
	}
	if !ok {
		miss = []string{"index " + s.sweepIndex()}
	}
	return false, miss, nil
}

// CheckSchema reports drift without changing anything: nil when the records
// table and its expiry index exist, else an *idem.SchemaError naming each
// one missing (`idem migrate --check`).
func (s *Store) CheckSchema(ctx context.Context) error {
	_, miss, err := s.missing(ctx, s.db)
	if err != nil {
		return fmt.Errorf("sqlite: check schema of %s: %w", s.opts.Table, err)
	}
	return schemaErr(miss)
}

func schemaErr(miss []string) error {
	if len(miss) == 0 {
		return nil
	}
	return &idem.SchemaError{Missing: miss}
}

// repair makes the recorded version true again inside Migrate's write
// transaction, before the steps run: with the records table gone the table
// counts as never migrated and every step runs again (the records went with
// the table); with the table there, a missing expiry index is recreated. It
// returns the version still applied.
func (s *Store) repair(ctx context.Context, tx *sql.Tx, cur int) (int, error) {
	table, miss, err := s.missing(ctx, tx)
	if err != nil || len(miss) == 0 {
		return cur, err
	}
	if table {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+quoteIdent(s.sweepIndex())+` ON `+quoteIdent(s.opts.Table)+` (expires_at)`); err != nil {
		return cur, fmt.Errorf("recreate index %s: %w", s.sweepIndex(), err)
	}
	return cur, nil
}

// missingTable returns err as an *idem.SchemaError naming the table when
// SQLite says it does not exist ("no such table", a plain SQLITE_ERROR whose
// message is the only tell), and nil otherwise: a dropped table is a store
// failure an operator must see, with the fix in the message.
func missingTable(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_ERROR {
		return nil
	}
	_, name, ok := strings.Cut(se.Error(), "no such table: ")
	if !ok {
		return nil
	}
	name, _, _ = strings.Cut(name, " ")
	return &idem.SchemaError{Missing: []string{"table " + name}, Err: err}
}
