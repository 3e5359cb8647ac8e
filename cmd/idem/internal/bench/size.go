package bench

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// Size is the on-disk size of an SQL store's records table.
type Size struct {
	Rows int64 `json:"rows"` // every record in the table, the run's own included
	// Table is the rows' own storage: PostgreSQL's heap (with TOAST and the
	// free space and visibility maps), MariaDB's clustered primary key,
	// SQLite's table b-tree.
	TableBytes int64            `json:"table_bytes"`
	Indexes    map[string]int64 `json:"index_bytes"` // each secondary index (and PostgreSQL's primary key)
	TotalBytes int64            `json:"total_bytes"`
	PerRecord  float64          `json:"bytes_per_record"` // total_bytes / rows
}

// sizeOf measures h's records table; nil for stores without one.
func sizeOf(ctx context.Context, h *dsn.Handle) (*Size, error) {
	tabled, _ := h.Native.(interface{ Table() string })
	if tabled == nil {
		return nil, nil
	}
	sz := &Size{Indexes: map[string]int64{}}
	var err error
	switch {
	case h.PG != nil:
		err = pgSize(ctx, h, tabled.Table(), sz)
	case h.SQL != nil && h.Scheme == "mysql":
		err = mysqlSize(ctx, h.SQL, tabled.Table(), sz)
	case h.SQL != nil && h.Scheme == "sqlite":
		err = sqliteSize(ctx, h.SQL, tabled.Table(), sz)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("size of the records table: %w", err)
	}
	for _, b := range sz.Indexes {
		sz.TotalBytes += b
	}
	sz.TotalBytes += sz.TableBytes
	if sz.Rows > 0 {
		sz.PerRecord = float64(sz.TotalBytes) / float64(sz.Rows)
	}
	return sz, nil
}

// pgLeaves is the table's leaf partitions, or the table itself.
const pgLeaves = `WITH l AS (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf),
leaves AS (SELECT relid FROM l UNION ALL SELECT $1::regclass WHERE NOT EXISTS (SELECT FROM l)) `

// pgSize sums over the table's leaf partitions (the table itself when it
// has none).
func pgSize(ctx context.Context, h *dsn.Handle, table string, sz *Size) error {
	if err := h.PG.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&sz.Rows); err != nil {
		return err
	}
	if err := h.PG.QueryRow(ctx, pgLeaves+`SELECT sum(pg_table_size(relid))::bigint FROM leaves`,
		table).Scan(&sz.TableBytes); err != nil {
		return err
	}
	rows, err := h.PG.Query(ctx, pgLeaves+`SELECT CASE WHEN i.indisprimary THEN 'primary key' ELSE
			(SELECT string_agg(attname, ', ') FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)) END,
		sum(pg_relation_size(i.indexrelid))::bigint, ''::text
	FROM leaves p JOIN pg_index i ON i.indrelid = p.relid GROUP BY 1`, table)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachSize(rows, func(name string, b int64, _ string) { sz.Indexes[name] = b })
}

// mysqlSize reads InnoDB's persistent statistics, refreshed first by
// ANALYZE TABLE: pages of each index times the page size.
func mysqlSize(ctx context.Context, db *sql.DB, table string, sz *Size) error {
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `"+table+"`").Scan(&sz.Rows); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT index_name, stat_value * @@innodb_page_size, '' FROM mysql.innodb_index_stats
		WHERE database_name = DATABASE() AND table_name = ? AND stat_name = 'size'`, table)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachSize(rows, func(name string, b int64, _ string) {
		if name == "PRIMARY" {
			sz.TableBytes = b
		} else {
			sz.Indexes[name] = b
		}
	})
}

// sqliteSize reads the dbstat virtual table: pages of the table's b-tree
// and of each index.
func sqliteSize(ctx context.Context, db *sql.DB, table string, sz *Size) error {
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM "`+table+`"`).Scan(&sz.Rows); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT d.name, sum(d.pgsize), m.type FROM dbstat d JOIN sqlite_master m ON m.name = d.name
		WHERE m.tbl_name = ? GROUP BY d.name, m.type`, table)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachSize(rows, func(name string, b int64, typ string) {
		if typ == "table" {
			sz.TableBytes = b
		} else {
			sz.Indexes[name] = b
		}
	})
}

// sizeRows is what pgx.Rows and *sql.Rows share.
type sizeRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// eachSize calls f with each row's name, bytes and kind.
func eachSize(rows sizeRows, f func(name string, b int64, kind string)) error {
	for rows.Next() {
		var (
			name, kind string
			b          int64
		)
		if err := rows.Scan(&name, &b, &kind); err != nil {
			return err
		}
		f(name, b, kind)
	}
	return rows.Err()
}
