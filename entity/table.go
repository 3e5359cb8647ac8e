package entity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/idemgo/idem"
)

// Table is a business table whose rows carry the idempotency key of the
// message that created them, under a unique constraint (or primary key) on
// KeyColumn, and the message's fingerprint in FingerprintColumn.
type Table struct {
	Dialect           Dialect
	Name              string // table name
	KeyColumn         string // unique column holding the message key (often the business id)
	FingerprintColumn string // column holding the message fingerprint; "" compares nothing
	// Scope is used in the errors' keys (for logs and dead letters).
	Scope string
}

// insertStmt is Insert's statement for cols: the table validated and the
// statement built on first use, cached after.
func (t *Table) insertStmt(cols []string) (string, error) {
	key := stmtKey(append([]string{"insert", strconv.Itoa(int(t.Dialect)), t.Name, t.KeyColumn, t.FingerprintColumn}, cols...)...)
	return cachedStmt(key, func() (string, error) {
		if err := t.Validate(); err != nil {
			return "", err
		}
		all := append([]string{t.KeyColumn}, cols...)
		if t.FingerprintColumn != "" {
			all = append(all, t.FingerprintColumn)
		}
		for _, c := range all {
			if err := checkIdent("column", c); err != nil {
				return "", err
			}
		}
		d := t.Dialect
		stmt := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", d.quote(t.Name), d.columns(all), d.placeholders(len(all)))
		if d == MySQL {
			// A no-op update of the key: nothing changes and "rows affected" is 0.
			stmt += fmt.Sprintf(" ON DUPLICATE KEY UPDATE %s = %s", d.quote(t.KeyColumn), d.quote(t.KeyColumn))
		} else {
			stmt += fmt.Sprintf(" ON CONFLICT (%s) DO NOTHING", d.quote(t.KeyColumn))
		}
		return stmt, nil
	})
}

// Validate checks the dialect and identifiers.
func (t *Table) Validate() error {
	if err := t.Dialect.valid(); err != nil {
		return err
	}
	if err := checkIdent("table", t.Name); err != nil {
		return err
	}
	if err := checkIdent("key column", t.KeyColumn); err != nil {
		return err
	}
	if t.FingerprintColumn != "" {
		return checkIdent("fingerprint column", t.FingerprintColumn)
	}
	return nil
}

// Insert inserts one business row keyed by key, with the fingerprint stored
// beside it, and the other columns cols = vals. It uses a conflict-free insert
// inside q's transaction: a concurrent transaction inserting the same key
// waits for this one and then sees its row.
//
// It returns nil when the row was inserted (go on with the message's other
// writes in the same transaction), *idem.DuplicateError when a row with this
// key and the same fingerprint exists (the message was processed: ack), and
// *idem.ConflictError when the stored fingerprint differs (dead-letter).
// Columns must be plain identifiers.
func (t *Table) Insert(ctx context.Context, q Querier, key, fingerprint string, cols []string, vals []any) error {
	if len(cols) != len(vals) {
		return fmt.Errorf("entity: %d columns and %d values", len(cols), len(vals))
	}
	stmt, err := t.insertStmt(cols)
	if err != nil {
		return err
	}
	if key == "" {
		return &idem.KeyError{Reason: "entity key is empty", Err: idem.ErrNoKey}
	}
	args := make([]any, 0, len(vals)+2)
	args = append(append(args, key), vals...)
	if t.FingerprintColumn != "" {
		args = append(args, fingerprint)
	}
	d := t.Dialect
	n, err := q.Exec(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	k := idem.Key{Scope: t.Scope, ID: key}
	if t.FingerprintColumn == "" {
		return &idem.DuplicateError{}
	}
	var stored sql.NullString
	sel := fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", d.quote(t.FingerprintColumn), d.quote(t.Name), d.quote(t.KeyColumn), d.placeholder(1))
	if d == MySQL {
		// Under REPEATABLE READ a plain read could miss a row committed by a
		// concurrent transaction after this one's snapshot; a locking read
		// sees it.
		sel += " LOCK IN SHARE MODE"
	}
	if err := q.QueryRow(ctx, sel, []any{&stored}, key); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("entity: insert of %s found a conflicting row that is gone; retry", k)
		}
		return err
	}
	if stored.String != fingerprint && stored.String != "" && fingerprint != "" {
		return &idem.ConflictError{Key: k, Fingerprint: fingerprint, Record: idem.Record{
			Scope: t.Scope, ID: key, DisplayID: key, State: idem.StateCompleted, Fingerprint: stored.String,
		}}
	}
	return &idem.DuplicateError{}
}
