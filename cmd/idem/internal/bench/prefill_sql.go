package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// idPrefix is the first 13 characters of record n's id (n in hex, with the
// dash): ids sort by n, so every record at n or above has an id at or
// above it, and every record below n one below it.
func idPrefix(n int64) string {
	t := fmt.Sprintf("%012x", n)
	return t[:8] + "-" + t[8:12]
}

// idShape matches prefill ids (LIKE) and not other keys of the scope, such
// as the random ones store/postgres's BenchmarkAtSize claims there.
const idShape = "________-____-7___-8___-____________"

// pgLoader generates each chunk inside PostgreSQL: one INSERT .. SELECT
// over generate_series, computing recordN's values in SQL, so nothing
// crosses the network but the statement.
type pgLoader struct {
	pool  *pgxpool.Pool
	table string // quoted
}

func (l *pgLoader) how() string {
	return "INSERT .. SELECT FROM generate_series, 50,000 rows a transaction, 2 at a time"
}
func (l *pgLoader) workers() int { return 2 }

func (l *pgLoader) present(ctx context.Context, a, b int64) (int64, error) {
	var n int64
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM `+l.table+` WHERE scope = $1 AND id >= $2 AND id < $3 AND id LIKE $4`,
		PrefillScope, idPrefix(a), idPrefix(b), idShape).Scan(&n)
	return n, err
}

func (l *pgLoader) beyond(ctx context.Context, n int64) (bool, error) {
	var ok bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+l.table+` WHERE scope = $1 AND id >= $2 AND id LIKE $3)`,
		PrefillScope, idPrefix(n), idShape).Scan(&ok)
	return ok, err
}

// pgRecordSQL is recordN in SQL, over n from generate_series: $1 scope,
// $2 base, $3 expired records, $4 result size, $5 and $6 the range, $7 the
// step in milliseconds.
const pgRecordSQL = `SELECT $1::text, substr(t, 1, 8) || '-' || substr(t, 9, 4) || '-7' || substr(r, 1, 3) || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12),
	2, encode(sha256(n::text::bytea), 'hex'),
	CASE WHEN $4::int > 0 THEN substring(decode(repeat(r, ($4::int + 15) / 16), 'hex') FROM 1 FOR $4::int) END,
	4294967296 + (n * 2654435761) % 1099511627776, 1,
	e - interval '7 days' + interval '30 seconds', e, date_trunc('second', e), e - interval '7 days', e - interval '7 days' + interval '20 milliseconds'
FROM generate_series($5::bigint, $6::bigint - 1) AS n,
	LATERAL (SELECT lpad(to_hex(n), 12, '0') AS t, md5(n::text) AS r,
		CASE WHEN n < $3::bigint
			THEN $2::timestamptz - interval '1 minute' - ($3::bigint - 1 - n) * $7::bigint * interval '1 millisecond'
			ELSE $2::timestamptz + interval '1 hour' + (n - $3::bigint) * $7::bigint * interval '1 millisecond' END AS e) AS v`

func (l *pgLoader) load(ctx context.Context, a, b int64, p Prefill, lay layout) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO `+l.table+` (scope, id, state, fingerprint, result, token, attempts,
		lease_until, expires_at, sweep_at, created_at, updated_at) `+pgRecordSQL+` ON CONFLICT DO NOTHING`,
		PrefillScope, lay.base, lay.expired, p.ResultBytes, a, b, lay.step)
	return err
}

// sqlLoader writes each chunk from Go in one transaction of multi-row
// inserts that skip rows already there (MariaDB INSERT IGNORE, SQLite
// INSERT OR IGNORE). Times are Unix milliseconds in both stores.
type sqlLoader struct {
	db      *sql.DB
	table   string // quoted
	dialect string // mysql or sqlite
	par     int
}

func (l *sqlLoader) how() string {
	return fmt.Sprintf("multi-row INSERTs of 500 rows, 50,000 rows a transaction, %d at a time", l.par)
}
func (l *sqlLoader) workers() int { return l.par }

func (l *sqlLoader) present(ctx context.Context, a, b int64) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM `+l.table+` WHERE scope = ? AND id >= ? AND id < ? AND id LIKE ?`,
		PrefillScope, idPrefix(a), idPrefix(b), idShape).Scan(&n)
	return n, err
}

func (l *sqlLoader) beyond(ctx context.Context, n int64) (bool, error) {
	var ok bool
	err := l.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+l.table+` WHERE scope = ? AND id >= ? AND id LIKE ?)`,
		PrefillScope, idPrefix(n), idShape).Scan(&ok)
	return ok, err
}

const sqlRowsPerInsert = 500

func (l *sqlLoader) load(ctx context.Context, a, b int64, p Prefill, lay layout) error {
	verb := "INSERT IGNORE INTO "
	if l.dialect == "sqlite" {
		verb = "INSERT OR IGNORE INTO "
	}
	const cols = 12
	head := verb + l.table + ` (scope, id, display_id, state, fingerprint, result, token, attempts, lease_until, expires_at, created_at, updated_at) VALUES `
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	args := make([]any, 0, sqlRowsPerInsert*cols)
	for lo := a; lo < b; lo += sqlRowsPerInsert {
		hi := min(lo+sqlRowsPerInsert, b)
		args = args[:0]
		for n := lo; n < hi; n++ {
			r := recordN(n, lay)
			var display any // MariaDB: NULL when the id is its own display id
			if l.dialect == "sqlite" {
				display = r.id
			}
			var result any
			if p.ResultBytes > 0 {
				result = resultN(n, p.ResultBytes)
			}
			c := r.created.UnixMilli()
			args = append(args, PrefillScope, r.id, display, "completed", r.fingerprint, result, r.token, 1,
				c+30_000, r.expires.UnixMilli(), c, c+20)
		}
		q := head + strings.TrimSuffix(strings.Repeat(row+",", int(hi-lo)), ",")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}
