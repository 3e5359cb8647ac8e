package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// VersionTable records the schema version of each records table, so several
// tables (one per Options.Table) share one database and migrate separately.
const VersionTable = "idem_schema_versions"

// ErrSchemaTooNew means the table was migrated by a newer idem than this one:
// running older code against it could corrupt records, so Migrate refuses.
var ErrSchemaTooNew = errors.New("sqlite: schema is newer than this version of idem")

type migration struct {
	version int
	name    string
	sql     string
}

// migrations reads the embedded schema steps, named NNN_description.sql and
// applied in order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(schemaFS, "schema/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "schema/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("sqlite: schema file %s is not named NNN_description.sql", base)
		}
		b, err := schemaFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// SchemaVersion is the schema version this package migrates tables to.
func SchemaVersion() int {
	m, err := migrations()
	if err != nil || len(m) == 0 {
		return 0
	}
	return m[len(m)-1].version
}

// Migrate creates or upgrades the records table to SchemaVersion. It is
// idempotent and safe to run from several processes at once: the steps and
// the version bump commit in one write transaction (SQLite's DDL is
// transactional), so a second caller waits and then finds nothing to do.
// The schema is believed over the recorded version: a records table dropped
// since is made again (every step runs again) and a dropped expiry index is
// recreated; CheckSchema reports the same drift without changing anything.
func (s *Store) Migrate(ctx context.Context) error {
	steps, err := migrations()
	if err != nil {
		return err
	}
	r := strings.NewReplacer("{{table}}", quoteIdent(s.opts.Table), "{{index}}", quoteIdent(s.opts.Table+"_expires_at"),
		"{{new}}", quoteIdent(s.opts.Table+"_migrating")) // a step that rebuilds the table builds it as {{new}}
	// The version table is created first, on its own: the migration
	// transaction takes the writer lock by writing to it.
	if err := s.writeTxLock(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+VersionTable+` (
			table_name TEXT PRIMARY KEY,
			version    INTEGER NOT NULL,
			applied_at INTEGER NOT NULL
		)`)
		return err
	}); err != nil {
		return fmt.Errorf("sqlite: migrate %s: %w", s.opts.Table, err)
	}
	err = s.writeTxLock(ctx, `UPDATE `+VersionTable+` SET version = version WHERE 0`, func(ctx context.Context, tx *sql.Tx) error {
		var cur int
		err := tx.QueryRowContext(ctx, `SELECT version FROM `+VersionTable+` WHERE table_name = ?`, s.opts.Table).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if latest := steps[len(steps)-1].version; cur > latest {
			return fmt.Errorf("%w: table %s is at version %d, this build knows %d", ErrSchemaTooNew, s.opts.Table, cur, latest)
		}
		if cur > 0 {
			// The bookkeeping says what was made; the schema says what is.
			if cur, err = s.repair(ctx, tx, cur); err != nil {
				return err
			}
		}
		for _, m := range steps {
			if m.version <= cur {
				continue
			}
			if _, err := tx.ExecContext(ctx, r.Replace(m.sql)); err != nil {
				return fmt.Errorf("step %s: %w", m.name, err)
			}
			cur = m.version
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+VersionTable+` (table_name, version, applied_at) VALUES (?, ?, ?)
			ON CONFLICT (table_name) DO UPDATE SET version = excluded.version, applied_at = excluded.applied_at
			WHERE version <> excluded.version`, s.opts.Table, cur, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		_, miss, err := s.missing(ctx, tx)
		if err != nil {
			return err
		}
		return schemaErr(miss)
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate %s: %w", s.opts.Table, err)
	}
	return nil
}
