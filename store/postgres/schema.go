package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem"
)

// schemaObject is one object the migrations create and the store needs.
type schemaObject struct {
	kind   string // table, index, partition
	name   string // quoted, as to_regclass reads it
	repair string // the statement that recreates it on a table that exists; "" when only the migrations can
}

func (o schemaObject) String() string { return o.kind + " " + o.name }

// schemaObjects lists the table, its partitions and the sweep index.
func (s *Store) schemaObjects() []schemaObject {
	index := s.names.sweepIndex
	if s.names.schema != "" {
		index = pgx.Identifier{s.names.schema, s.names.base + "_sweep_idx"}.Sanitize()
	}
	objs := []schemaObject{{kind: "table", name: s.names.table}}
	for i := range s.opts.Partitions {
		objs = append(objs, schemaObject{kind: "partition", name: s.names.derived("_p" + strconv.Itoa(i))})
	}
	return append(objs, schemaObject{kind: "index", name: index,
		repair: `CREATE INDEX IF NOT EXISTS ` + s.names.sweepIndex + ` ON ` + s.names.table + ` (sweep_at)`})
}

// missing returns the schema objects that do not exist.
func (s *Store) missing(ctx context.Context, q querier) ([]schemaObject, error) {
	var out []schemaObject
	for _, o := range s.schemaObjects() {
		var found bool
		if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, o.name).Scan(&found); err != nil {
			return nil, err
		}
		if !found {
			out = append(out, o)
		}
	}
	return out, nil
}

// CheckSchema reports drift without changing anything: nil when the records
// table, its partitions and the sweep index all exist, else an
// *idem.SchemaError naming each one missing (`idem migrate --check`).
func (s *Store) CheckSchema(ctx context.Context) error {
	miss, err := s.missing(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("postgres: check schema of %s: %w", s.names.qualified, err)
	}
	return schemaErr(miss, nil)
}

func schemaErr(miss []schemaObject, cause error) error {
	if len(miss) == 0 {
		return nil
	}
	names := make([]string, len(miss))
	for i, o := range miss {
		names[i] = o.String()
	}
	return &idem.SchemaError{Missing: names, Err: cause}
}

// repair makes the recorded migrations true again, inside Migrate's
// transaction: with the records table gone every migration is forgotten
// and runs again (the records went with the table); with the table there,
// a missing index is recreated. A missing partition of a table that exists
// cannot be recreated without moving rows, so it is reported.
func (s *Store) repair(ctx context.Context, tx pgx.Tx, applied map[int]bool) error {
	miss, err := s.missing(ctx, tx)
	if err != nil || len(miss) == 0 {
		return err
	}
	if miss[0].kind == "table" {
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.names.migrations); err != nil {
			return err
		}
		clear(applied)
		return nil
	}
	for _, o := range miss {
		if o.repair == "" {
			return schemaErr(miss, nil)
		}
		if _, err := tx.Exec(ctx, o.repair); err != nil {
			return fmt.Errorf("recreate %s: %w", o, err)
		}
	}
	return nil
}

// undefinedTable is SQLSTATE 42P01.
const undefinedTable = "42P01"

// missingTable returns err as an *idem.SchemaError naming the relation when
// the server says it does not exist, and nil otherwise: a dropped table is a
// store failure an operator must see, with the fix in the message.
func missingTable(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != undefinedTable {
		return nil
	}
	name := pe.Message
	if _, rest, ok := strings.Cut(pe.Message, `relation "`); ok {
		name, _, _ = strings.Cut(rest, `"`)
	}
	return &idem.SchemaError{Missing: []string{"table " + name}, Err: err}
}
