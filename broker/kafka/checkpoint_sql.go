package kafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// cpSQL is the checkpoint table's SQL over transactions of type Tx.
type cpSQL[Tx any] interface {
	migrate(ctx context.Context, tx Tx) error
	// advance moves the position of rec's partition to rec.Offset+1 if it
	// is not past rec already (false then), creating the row if there is
	// none. It is the transaction's first statement, and takes the row's
	// lock, so that two writers of one partition apply each record once:
	// the second waits for the first, then finds the position moved.
	advance(ctx context.Context, tx Tx, scope string, rec *kgo.Record) (bool, error)
	positions(ctx context.Context, tx Tx, scope, topic string) (map[int32]int64, error)
}

// dialect returns the checkpoint SQL for Tx over cp's table: PostgreSQL
// for pgx.Tx; for *sql.Tx, SQL that SQLite and MySQL/MariaDB both speak.
func dialect[Tx any](cp Checkpoints) (cpSQL[Tx], error) {
	parts, err := cp.table()
	if err != nil {
		return nil, err
	}
	var d any
	switch reflect.TypeFor[Tx]() {
	case reflect.TypeFor[pgx.Tx]():
		d = newPgxCheckpoints(quote(parts, `"`))
	case reflect.TypeFor[*sql.Tx]():
		d = newSQLCheckpoints(quote(parts, "`"))
	default:
		return nil, fmt.Errorf("%w: kafka: no checkpoint SQL for %v transactions (use pgx.Tx or *sql.Tx)", idem.ErrInvalidOptions, reflect.TypeFor[Tx]())
	}
	return d.(cpSQL[Tx]), nil
}

// pgxCheckpoints is the table on PostgreSQL. One upsert moves the position
// or creates the row; ON CONFLICT never raises the unique violation that
// would abort the caller's transaction, and under READ COMMITTED (the
// store's) a concurrent writer's upsert waits for the row and then finds
// it moved.
type pgxCheckpoints struct {
	createSQL, advanceSQL, positionsSQL string
}

func newPgxCheckpoints(t string) pgxCheckpoints {
	return pgxCheckpoints{
		createSQL: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	scope        text        NOT NULL,
	topic        text        NOT NULL,
	partition_id integer     NOT NULL,
	next_offset  bigint      NOT NULL,
	updated_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (scope, topic, partition_id)
)`,
		advanceSQL: `INSERT INTO ` + t + ` AS c (scope, topic, partition_id, next_offset) VALUES ($1, $2, $3, $4)
ON CONFLICT (scope, topic, partition_id) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
WHERE c.next_offset < EXCLUDED.next_offset`,
		positionsSQL: `SELECT partition_id, next_offset FROM ` + t + ` WHERE scope = $1 AND topic = $2`,
	}
}

func (q pgxCheckpoints) migrate(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, q.createSQL)
	return err
}

func (q pgxCheckpoints) advance(ctx context.Context, tx pgx.Tx, scope string, rec *kgo.Record) (bool, error) {
	tag, err := tx.Exec(ctx, q.advanceSQL, scope, rec.Topic, rec.Partition, rec.Offset+1)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func (q pgxCheckpoints) positions(ctx context.Context, tx pgx.Tx, scope, topic string) (map[int32]int64, error) {
	rows, err := tx.Query(ctx, q.positionsSQL, scope, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	var (
		n    int32
		next int64
	)
	_, err = pgx.ForEachRow(rows, []any{&n, &next}, func() error {
		out[n] = next
		return nil
	})
	return out, err
}

// sqlCheckpoints is the table on SQLite and MySQL/MariaDB, in SQL both
// take: backquoted names, ? placeholders, VARBINARY keys bound as bytes
// (compared byte for byte: no collation folds case), CURRENT_TIMESTAMP.
// An UPDATE moves the position (on MySQL, a locking read of the row's
// latest version, whatever the isolation level); only when it moves
// nothing does a read tell a position already past the record from a
// missing row, which is inserted. Two first writers of one partition race
// only on that insert: the loser's fails, its transaction rolls back, and
// its retry finds the row.
type sqlCheckpoints struct {
	createSQL, update, read, insert, positionsSQL string
}

func newSQLCheckpoints(t string) sqlCheckpoints {
	return sqlCheckpoints{
		createSQL: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	scope        VARBINARY(200) NOT NULL,
	topic        VARBINARY(255) NOT NULL,
	partition_id INT            NOT NULL,
	next_offset  BIGINT         NOT NULL,
	updated_at   DATETIME       NOT NULL DEFAULT CURRENT_TIMESTAMP,
	PRIMARY KEY (scope, topic, partition_id)
)`,
		update: `UPDATE ` + t + ` SET next_offset = ?, updated_at = CURRENT_TIMESTAMP
WHERE scope = ? AND topic = ? AND partition_id = ? AND next_offset < ?`,
		read:         `SELECT next_offset FROM ` + t + ` WHERE scope = ? AND topic = ? AND partition_id = ?`,
		insert:       `INSERT INTO ` + t + ` (scope, topic, partition_id, next_offset) VALUES (?, ?, ?, ?)`,
		positionsSQL: `SELECT partition_id, next_offset FROM ` + t + ` WHERE scope = ? AND topic = ?`,
	}
}

// errMoved is a position written by another transaction between this
// one's update and its read: the record is retried.
var errMoved = errors.New("kafka: the checkpoint moved under the transaction")

func (q sqlCheckpoints) migrate(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, q.createSQL)
	return err
}

func (q sqlCheckpoints) advance(ctx context.Context, tx *sql.Tx, scope string, rec *kgo.Record) (bool, error) {
	next := rec.Offset + 1
	s, t := []byte(scope), []byte(rec.Topic)
	r, err := tx.ExecContext(ctx, q.update, next, s, t, rec.Partition, next)
	if err != nil {
		return false, err
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return n == 1, err
	}
	var stored int64
	switch err := tx.QueryRowContext(ctx, q.read, s, t, rec.Partition).Scan(&stored); {
	case errors.Is(err, sql.ErrNoRows):
		_, err := tx.ExecContext(ctx, q.insert, s, t, rec.Partition, next)
		return err == nil, err
	case err != nil:
		return false, err
	case stored >= next:
		return false, nil
	}
	return false, errMoved
}

func (q sqlCheckpoints) positions(ctx context.Context, tx *sql.Tx, scope, topic string) (map[int32]int64, error) {
	rows, err := tx.QueryContext(ctx, q.positionsSQL, []byte(scope), []byte(topic))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int32]int64)
	for rows.Next() {
		var (
			n    int32
			next int64
		)
		if err := rows.Scan(&n, &next); err != nil {
			return nil, err
		}
		out[n] = next
	}
	return out, rows.Err()
}
