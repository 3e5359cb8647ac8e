package entity

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemgo/idem"
)

// Versioned is a table of entities updated by state-transfer messages that
// carry a monotonically increasing version (or sequence). IDColumn must be
// the primary key or unique.
type Versioned struct {
	Dialect       Dialect
	Name          string
	IDColumn      string
	VersionColumn string
}

// Validate checks the dialect and identifiers.
func (v *Versioned) Validate() error {
	if err := v.Dialect.valid(); err != nil {
		return err
	}
	for kind, name := range map[string]string{"table": v.Name, "id column": v.IDColumn, "version column": v.VersionColumn} {
		if err := checkIdent(kind, name); err != nil {
			return err
		}
	}
	return nil
}

// applyStmt is Apply's statement for cols: the table validated and the
// statement built on first use, cached after.
func (v *Versioned) applyStmt(cols []string) (string, error) {
	key := stmtKey(append([]string{"apply", strconv.Itoa(int(v.Dialect)), v.Name, v.IDColumn, v.VersionColumn}, cols...)...)
	return cachedStmt(key, func() (string, error) {
		if err := v.Validate(); err != nil {
			return "", err
		}
		for _, c := range cols {
			if err := checkIdent("column", c); err != nil {
				return "", err
			}
		}
		d := v.Dialect
		all := append([]string{v.IDColumn, v.VersionColumn}, cols...)
		stmt := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", d.quote(v.Name), d.columns(all), d.placeholders(len(all)))
		ver := d.quote(v.VersionColumn)
		sets := make([]string, 0, len(cols)+1)
		if d == MySQL {
			// Assignments run left to right and see earlier ones, so the version
			// is compared in every column's IF and assigned last.
			newer := fmt.Sprintf("%s < VALUES(%s)", ver, ver)
			for _, c := range cols {
				qc := d.quote(c)
				sets = append(sets, fmt.Sprintf("%s = IF(%s, VALUES(%s), %s)", qc, newer, qc, qc))
			}
			sets = append(sets, fmt.Sprintf("%s = IF(%s, VALUES(%s), %s)", ver, newer, ver, ver))
			return stmt + " ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", "), nil
		}
		for _, c := range append([]string{v.VersionColumn}, cols...) {
			qc := d.quote(c)
			sets = append(sets, fmt.Sprintf("%s = excluded.%s", qc, qc))
		}
		return stmt + fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET %s WHERE %s.%s < excluded.%s",
			d.quote(v.IDColumn), strings.Join(sets, ", "), d.quote(v.Name), ver, ver), nil
	})
}

// Apply writes the entity's state (cols = vals) at version, in ONE
// conditional statement: inserted when absent, updated only when the stored
// version is older. An older or equal version changes nothing and returns an
// error wrapping idem.ErrSuperseded (ack and skip; the guard reports
// OutcomeSuperseded).
func (v *Versioned) Apply(ctx context.Context, q Querier, id any, version int64, cols []string, vals []any) error {
	if len(cols) != len(vals) {
		return fmt.Errorf("entity: %d columns and %d values", len(cols), len(vals))
	}
	stmt, err := v.applyStmt(cols)
	if err != nil {
		return err
	}
	args := make([]any, 0, len(vals)+2)
	args = append(append(args, id, version), vals...)
	n, err := q.Exec(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s %v at version %d: %w", v.Name, id, version, idem.ErrSuperseded)
	}
	return nil
}
