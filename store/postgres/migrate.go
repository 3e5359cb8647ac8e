package postgres

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Advisory lock classes (the first key of the two-key form): one per purpose,
// so migrating and sweeping one table never wait for each other. The second
// key is a hash of the table name.
const (
	lockClassMigrate int32 = 0x69640001 // "id" 1
	lockClassSweep   int32 = 0x69640002 // "id" 2
)

// lockKey is the second advisory-lock key of the table: a 32-bit hash of its
// name as configured. Two tables colliding on it only share a lock.
func lockKey(table string) int32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return int32(h.Sum32())
}

type migration struct {
	version int
	name    string
	sql     string
}

type partition struct {
	Name               string
	Modulus, Remainder int
}

// migrations renders the embedded migrations for the store's table.
func (s *Store) migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	data := struct {
		Table, SweepIndex, Storage string
		Partitions                 []partition
	}{
		Table:      s.names.table,
		SweepIndex: s.names.sweepIndex,
		// Sweeps and two-phase updates leave dead tuples at a steady rate; the
		// default scale factor (0.2) would let 20M of them pile up in a
		// 100M-row table before autovacuum runs.
		Storage: fmt.Sprintf("fillfactor = %d, autovacuum_vacuum_scale_factor = 0.02", s.opts.FillFactor),
	}
	for i := range s.opts.Partitions {
		data.Partitions = append(data.Partitions, partition{
			Name: s.names.derived("_p" + strconv.Itoa(i)), Modulus: s.opts.Partitions, Remainder: i,
		})
	}
	var out []migration
	for _, f := range files {
		base := path.Base(f)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("postgres: migration file %s has no version prefix", base)
		}
		raw, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(base).Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", base, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: buf.String()})
	}
	return out, nil
}

// Migrate creates or upgrades the store's table. It is idempotent and safe
// to run from every instance at start-up: the whole migration runs in one
// transaction under an advisory lock, so concurrent callers wait for the
// first and then find nothing left to do. Applied versions are recorded in
// Table+"_migrations", but the schema is believed over them: a records table
// dropped since is made again (every migration runs again), a dropped sweep
// index is recreated, and what cannot be (a partition of a table that
// exists) fails Migrate with an *idem.SchemaError naming it. CheckSchema
// reports the same drift without changing anything.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := s.migrations()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClassMigrate, lockKey(s.names.qualified)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.names.migrations+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		applied := map[int]bool{}
		rows, err := tx.Query(ctx, `SELECT version FROM `+s.names.migrations)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		for _, v := range vs {
			applied[int(v)] = true
		}
		if len(applied) > 0 {
			// The bookkeeping says what was made; the schema says what is.
			if err := s.repair(ctx, tx, applied); err != nil {
				return err
			}
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			// No arguments: the simple protocol runs the file's statements as one batch.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+s.names.migrations+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
		}
		miss, err := s.missing(ctx, tx)
		if err != nil {
			return err
		}
		return schemaErr(miss, nil)
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", s.names.qualified, err)
	}
	return nil
}
