package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
)

// sweepIndex is the index on expires_at that Sweep and Stats read.
const sweepIndex = "expires_at"

// missing returns what the migrations create and the database lacks: the
// records table ("table <name>") and its sweep index ("index <name>").
func (s *Store) missing(ctx context.Context, q queryRower) (table bool, miss []string, err error) {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
		s.name).Scan(&n); err != nil {
		return false, nil, err
	}
	if n == 0 {
		return true, []string{"table " + s.name, "index " + s.name + "." + sweepIndex}, nil
	}
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?",
		s.name, sweepIndex).Scan(&n); err != nil {
		return false, nil, err
	}
	if n == 0 {
		miss = []string{"index " + s.name + "." + sweepIndex}
	}
	return false, miss, nil
}

// CheckSchema reports drift without changing anything: nil when the records
// table and its sweep index exist, else an *idem.SchemaError naming each one
// missing (`idem migrate --check`).
func (s *Store) CheckSchema(ctx context.Context) error {
	_, miss, err := s.missing(ctx, s.db)
	if err != nil {
		return fmt.Errorf("mysql: check schema of %s: %w", s.name, err)
	}
	return schemaErr(miss)
}

func schemaErr(miss []string) error {
	if len(miss) == 0 {
		return nil
	}
	return &idem.SchemaError{Missing: miss}
}

// repair makes the recorded migrations true again before Migrate applies
// the rest: with the records table gone every migration is forgotten and
// runs again (the records went with the table); with the table there, a
// missing sweep index is recreated. It returns the version still applied.
func (s *Store) repair(ctx context.Context, conn connExecQuerier, vt string, cur int) (int, error) {
	table, miss, err := s.missing(ctx, conn)
	if err != nil || len(miss) == 0 {
		return cur, err
	}
	if table {
		if _, err := conn.ExecContext(ctx, "DELETE FROM "+vt); err != nil {
			return cur, err
		}
		return 0, nil
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+s.table+" ADD INDEX "+sweepIndex+" ("+sweepIndex+")"); err != nil {
		return cur, fmt.Errorf("recreate index %s: %w", sweepIndex, err)
	}
	return cur, nil
}

type connExecQuerier interface {
	execer
	queryRower
}

// missingTable returns err as an *idem.SchemaError naming the table when
// the server says it does not exist (ER_NO_SUCH_TABLE), and nil otherwise:
// a dropped table is a store failure an operator must see, with the fix in
// the message.
func missingTable(err error) error {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != errNoSuchTable {
		return nil
	}
	name := me.Message
	if _, rest, ok := strings.Cut(me.Message, "'"); ok {
		name, _, _ = strings.Cut(rest, "'")
	}
	return &idem.SchemaError{Missing: []string{"table " + name}, Err: err}
}
