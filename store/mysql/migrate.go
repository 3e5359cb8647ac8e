package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

const errNoSuchTable = 1146

var errMigrateLock = errors.New("mysql: migrate: could not take the migration lock")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationsSuffix names the table that records applied schema versions,
// one per records table: "<table>_migrations".
const migrationsSuffix = "_migrations"

type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations returns the embedded migrations in version order, with the
// table name substituted (it was validated as an identifier).
func (s *Store) migrations() ([]migration, error) {
	entries, err := migrationFiles.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("mysql: migration %s: no version prefix", name)
		}
		body, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		text := strings.ReplaceAll(string(body), "{{table}}", s.table)
		var stmts []string
		for _, st := range strings.Split(text, ";\n") {
			if st = strings.TrimSpace(stripComments(st)); st != "" {
				stmts = append(stmts, st)
			}
		}
		out = append(out, migration{v, name, stmts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Migrate creates or upgrades the schema: the records table and
// "<table>_migrations", which records the applied versions. It is idempotent
// and safe to run from many instances at once: they take turns under a
// named lock (GET_LOCK), and each step is itself idempotent (MySQL commits
// DDL implicitly, so a step interrupted half-way is simply redone). The
// schema is believed over the bookkeeping: a records table dropped since is
// made again (every migration runs again) and a dropped sweep index is
// recreated; CheckSchema reports the same drift without changing anything.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := s.migrations()
	if err != nil {
		return err
	}
	for {
		got, err := s.withNamedLock(ctx, "migrate", 2*time.Second, func(conn *sql.Conn) error {
			return s.migrate(ctx, conn, ms)
		})
		if err != nil {
			return fmt.Errorf("mysql: migrate %s: %w", s.name, err)
		}
		if got {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", errMigrateLock, err)
		}
	}
}

func (s *Store) migrate(ctx context.Context, conn *sql.Conn, ms []migration) error {
	vt := "`" + s.name + migrationsSuffix + "`"
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+vt+
		" (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL) ENGINE = InnoDB"); err != nil {
		return err
	}
	var cur int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+vt).Scan(&cur); err != nil {
		return err
	}
	if cur > 0 {
		// The bookkeeping says what was made; the schema says what is.
		var err error
		if cur, err = s.repair(ctx, conn, vt, cur); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if m.version <= cur {
			continue
		}
		for _, st := range m.stmts {
			if _, err := conn.ExecContext(ctx, st); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+vt+" (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, time.Now().UnixMilli()); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	_, miss, err := s.missing(ctx, conn)
	if err != nil {
		return err
	}
	return schemaErr(miss)
}

// SchemaVersion returns the highest applied migration version (0 before
// Migrate).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM `"+s.name+migrationsSuffix+"`").Scan(&v)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == errNoSuchTable {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return v, nil
}
