package dsn

import (
	"context"
	"database/sql"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// recordColumns are the columns every SQL store's records table has: a
// table with all of them is taken for one of idem's.
var recordColumns = []string{"scope", "id", "state", "fingerprint", "token", "attempts", "lease_until", "expires_at"}

func quotedColumns() string {
	q := make([]string, len(recordColumns))
	for i, c := range recordColumns {
		q[i] = "'" + c + "'"
	}
	return strings.Join(q, ", ")
}

// sqliteTables lists the records tables of an SQLite database.
func sqliteTables(db *sql.DB) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		return queryNames(ctx, db, `SELECT m.name FROM sqlite_master m WHERE m.type = 'table'
			AND (SELECT count(*) FROM pragma_table_info(m.name) p WHERE p.name IN (`+quotedColumns()+`)) = ?
			ORDER BY m.name`, len(recordColumns))
	}
}

// mysqlTables lists the records tables of the connection's database.
func mysqlTables(db *sql.DB) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		return queryNames(ctx, db, `SELECT table_name FROM information_schema.columns
			WHERE table_schema = DATABASE() AND column_name IN (`+quotedColumns()+`)
			GROUP BY table_name HAVING count(*) = ? ORDER BY table_name`, len(recordColumns))
	}
}

// pgTables lists the records tables the connection can see, schema-qualified
// outside its current schema; partitions are not listed, their parent is.
func pgTables(pool *pgxpool.Pool) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		rows, err := pool.Query(ctx, `SELECT CASE WHEN n.nspname = current_schema() THEN c.relname ELSE n.nspname || '.' || c.relname END
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
				AND n.nspname NOT IN ('pg_catalog', 'information_schema')
				AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped AND a.attname::text = ANY($1::text[])) = $2
			ORDER BY 1`, recordColumns, len(recordColumns))
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
}

func queryNames(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// SetParam returns the DSN d with its query parameter key set to val,
// replacing the parameter if d has it and keeping the others in order.
func SetParam(d, key, val string) string {
	base, query, _ := strings.Cut(d, "?")
	var parts []string
	if query != "" {
		parts = strings.Split(query, "&")
	}
	set := false
	for i, p := range parts {
		if k, _, _ := strings.Cut(p, "="); k == key {
			parts[i], set = key+"="+val, true
		}
	}
	if !set {
		parts = append(parts, key+"="+val)
	}
	return base + "?" + strings.Join(parts, "&")
}
